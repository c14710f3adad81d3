"""Question families: each plants the messages that answer it, and the ones that nearly do, into a mailbox.

`build_episode(seed, family, size)` makes the background mailbox (`mailbox.py`) and the question in one
pure function of its arguments, so a task stores only those three and the env rebuilds the rest at reset.
Each family plants a **distractor** beside the answer: an older value superseded by a later message, the
same fact for another city or project, a draft beside the signed contract. The wrong values are recorded
(`Question.distractors`) so the verifier can refuse an answer that hedges between them.

- `booking_code`: the confirmation code of the current booking to a city. Traps: the first booking was
  cancelled and rebooked; another city's booking.
- `approved_budget`: how much a named person approved for a project. Traps: a proposal of another amount
  in the same thread; the approver's approval for another project.
- `kickoff_room`: the room of a project's kickoff. Trap: the invitation names a room, a later message
  moves it.
- `expense_count`: how many expense reports a person sent in a month. Traps: their reports in the
  neighbouring months; others' reports that month.
- `contract_sender`: who sent the signed contract of a vendor. Trap: a colleague sent the unsigned draft.
- `review_deadline`: the date a person needs a document reviewed by. Trap: the first deadline, later
  corrected.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta
from random import Random

from gym_env_inbox.mailbox import (
    CITIES,
    PROJECTS,
    ROOMS,
    VENDORS,
    YEAR,
    Mailbox,
    build_mailbox,
    code,
)

__all__ = ["FAMILIES", "Question", "build_episode", "date_forms"]

_MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
    "November", "December",
)  # fmt: skip
_NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


@dataclass(frozen=True, slots=True)
class Question:
    """What the model is asked, the accepted answers, the planted wrong values and the messages to cite."""

    prompt: str
    answers: tuple[str, ...]
    distractors: tuple[str, ...]
    message_ids: tuple[str, ...]


def date_forms(day: date) -> tuple[str, ...]:
    """The ways a date may be written in an answer: ISO, `May 14`, `14 May`, with or without the year."""
    month = _MONTHS[day.month - 1]
    return (
        day.isoformat(),
        f"{month} {day.day}",
        f"{day.day} {month}",
        f"{month} {day.day}, {day.year}",
        f"{month} {day.day} {day.year}",
        f"{day.day} {month} {day.year}",
    )


def _day(rng: Random, start_month: int = 1, end_month: int = 11) -> date:
    first = date(YEAR, start_month, 1)
    last = date(YEAR, end_month, 28)
    return first + timedelta(days=rng.randrange((last - first).days))


def _at(rng: Random, day: date) -> str:
    return f"{day.isoformat()}T{rng.randrange(8, 18):02d}:{rng.randrange(60):02d}"


def _booking_code(seed: int, size: int, rng: Random) -> tuple[Mailbox, Question]:
    city, other = rng.sample(CITIES, 2)
    mailbox = build_mailbox(seed, size, avoid=frozenset({city}))
    travel = mailbox.services["travel"]
    old, new, elsewhere = code(rng), code(rng), code(rng)
    first = _day(rng, 2, 9)
    body = "Thank you for booking with Skyway. Your trip to {city} is confirmed.\nConfirmation code: {code}"
    mailbox.add(travel, f"Booking confirmed: {city}", body.format(city=city, code=old), when=_at(rng, first))
    mailbox.add(travel, f"Booking confirmed: {other}", body.format(city=other, code=elsewhere))
    rebooked = mailbox.add(
        travel,
        f"Change to your {city} trip",
        f"As requested, booking {old} to {city} has been cancelled and your trip rebooked on a later "
        f"flight. Your new confirmation code is {new}. The old code is no longer valid.",
        when=_at(rng, first + timedelta(days=rng.randrange(3, 40))),
    )
    prompt = f"What is the confirmation code of my current booking for the trip to {city}?"
    return mailbox, Question(prompt, (new,), (old, elsewhere), (rebooked.id,))


def _approved_budget(seed: int, size: int, rng: Random) -> tuple[Mailbox, Question]:
    project, side = rng.sample(PROJECTS, 2)
    mailbox = build_mailbox(seed, size, avoid=frozenset({project, side}))
    approver, proposer = rng.sample(mailbox.colleagues, 2)
    asked, granted, elsewhere = (rng.randrange(20, 120) * 500 for _ in range(3))
    granted = granted if granted != asked else asked + 2_500
    day = _day(rng)
    proposal = mailbox.add(
        proposer,
        f"{project} budget",
        f"Hi {approver.first}, for {project} I am asking for ${asked:,} for the next phase. Can you approve?",
        when=_at(rng, day),
        to=(approver.address, mailbox.owner.address),
    )
    approval = mailbox.add(
        approver,
        f"Re: {project} budget",
        f"I can't do ${asked:,}. I have approved ${granted:,} for {project}; let's revisit next quarter.",
        when=_at(rng, day + timedelta(days=rng.randrange(1, 10))),
        thread=proposal.thread,
        to=(proposer.address, mailbox.owner.address),
    )
    mailbox.add(
        approver,
        f"{side} budget",
        f"Approved: ${elsewhere:,} for {side}. Go ahead.",
        when=_at(rng, _day(rng)),
    )
    prompt = f"How much money did {approver.name} approve for the {project} budget?"
    answers = (f"${granted:,}", f"{granted:,}", str(granted), f"${granted}", f"{granted:,} dollars")
    distractors = tuple(f"{value:,}" for value in {asked, elsewhere} if value != granted)
    return mailbox, Question(prompt, answers, distractors, (approval.id,))


def _kickoff_room(seed: int, size: int, rng: Random) -> tuple[Mailbox, Question]:
    project = rng.choice(PROJECTS)
    mailbox = build_mailbox(seed, size, avoid=frozenset({project}))
    organizer = rng.choice(mailbox.colleagues)
    first_room, final_room = rng.sample(ROOMS, 2)
    day = _day(rng)
    invite = mailbox.add(
        organizer,
        f"{project} kickoff",
        f"Hi all, the {project} kickoff will be on {day + timedelta(days=14):%A %d %B} in the {first_room} "
        "room. Bring your questions.",
        when=_at(rng, day),
    )
    moved = mailbox.add(
        organizer,
        f"Re: {project} kickoff",
        f"Small change: {first_room} is double-booked, so the {project} kickoff moves to the {final_room} "
        "room. Same time.",
        when=_at(rng, day + timedelta(days=rng.randrange(1, 10))),
        thread=invite.thread,
    )
    prompt = f"In which room will the {project} kickoff take place?"
    answers = (final_room, f"{final_room} room", f"the {final_room} room")
    return mailbox, Question(prompt, answers, (first_room,), (moved.id,))


def _expense_count(seed: int, size: int, rng: Random) -> tuple[Mailbox, Question]:
    mailbox = build_mailbox(seed, size)
    person = rng.choice(mailbox.colleagues)
    month = rng.randrange(2, 12)
    for _ in range(rng.randrange(1, 5)):  # planted, beside whatever the background already holds
        day = date(YEAR, month, rng.randrange(1, 29))
        mailbox.add(
            person,
            f"Expense report {rng.choice(('travel', 'team offsite', 'client dinner'))}",
            f"Hi, my expense report for {day:%B}: {rng.randrange(2, 9)} receipts attached.",
            when=_at(rng, day),
        )
    for neighbour in (month - 1, month + 1):
        day = date(YEAR, neighbour, rng.randrange(1, 29))
        mailbox.add(person, "Expense report travel", "Receipts attached, thanks.", when=_at(rng, day))
    prefix = f"{YEAR}-{month:02d}-"
    gold = tuple(
        email.id
        for email in mailbox.emails
        if email.sender == person
        and email.subject.startswith("Expense report")
        and email.date.startswith(prefix)
    )
    count = len(gold)
    answers = (str(count), _NUMBER_WORDS[count]) if count < len(_NUMBER_WORDS) else (str(count),)
    prompt = f"How many expense reports did {person.name} send me in {_MONTHS[month - 1]} {YEAR}?"
    return mailbox, Question(prompt, answers, (), gold)


def _contract_sender(seed: int, size: int, rng: Random) -> tuple[Mailbox, Question]:
    vendor = rng.choice(VENDORS)
    mailbox = build_mailbox(seed, size)
    signer, drafter = rng.sample(mailbox.colleagues, 2)
    day = _day(rng)
    mailbox.add(
        drafter,
        f"{vendor} contract draft",
        f"Here is the draft contract with {vendor} for your comments. Not signed yet.",
        when=_at(rng, day),
    )
    signed = mailbox.add(
        signer,
        f"Signed: {vendor} contract",
        f"Attached is the signed contract with {vendor}, countersigned by both parties. Filing a copy.",
        when=_at(rng, day + timedelta(days=rng.randrange(2, 20))),
    )
    prompt = f"Who sent me the signed contract with {vendor}? Give the person's full name."
    answers = (signer.name, signer.address)
    return mailbox, Question(prompt, answers, (drafter.name,), (signed.id,))


def _review_deadline(seed: int, size: int, rng: Random) -> tuple[Mailbox, Question]:
    project = rng.choice(PROJECTS)
    mailbox = build_mailbox(seed, size, avoid=frozenset({project}))
    requester = rng.choice(mailbox.colleagues)
    day = _day(rng, 1, 10)
    first = day + timedelta(days=rng.randrange(7, 20))
    final = first + timedelta(days=rng.randrange(2, 15))
    ask = mailbox.add(
        requester,
        f"Review request: {project} launch plan",
        f"Could you review the {project} launch plan by {first:%B} {first.day}? Thanks!",
        when=_at(rng, day),
    )
    corrected = mailbox.add(
        requester,
        f"Re: Review request: {project} launch plan",
        f"Correction: the {project} launch plan review is now due {final:%B} {final.day}, not "
        f"{first:%B} {first.day}.",
        when=_at(rng, day + timedelta(days=rng.randrange(1, 5))),
        thread=ask.thread,
    )
    prompt = f"By what date does {requester.name} need my review of the {project} launch plan?"
    return mailbox, Question(prompt, date_forms(final), date_forms(first)[1:3], (corrected.id,))


FAMILIES: dict[str, Callable[[int, int, Random], tuple[Mailbox, Question]]] = {
    "booking_code": _booking_code,
    "approved_budget": _approved_budget,
    "kickoff_room": _kickoff_room,
    "expense_count": _expense_count,
    "contract_sender": _contract_sender,
    "review_deadline": _review_deadline,
}


def build_episode(seed: int, family: str, size: int) -> tuple[Mailbox, Question]:
    """The sealed mailbox (newest first) and the question of one task; a pure function of its arguments.

    Raises:
        KeyError: `family` is not one of `FAMILIES`.
    """
    mailbox, question = FAMILIES[family](seed, size, Random(f"inbox-question\x00{family}\x00{seed}"))
    mailbox.seal()
    return mailbox, question
