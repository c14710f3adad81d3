"""The errands of the `workplace` environment: each adds to an `Office` and returns a request and its goals.

Every errand needs a look-up before the action, and most plant a distractor that punishes skipping it:
a second email on the same topic from someone else, the same meeting title on another day, a to-do a
colleague says they have *not* finished yet. Goals are written as `goals.py` models in JSON form.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gym_env_workplace.office import MEETING_TITLES, TODO_TITLES, Office, Retry
from gym_env_workplace.world import clock, minutes

__all__ = ["SCENARIOS", "Scenario", "time_mentions"]

Scenario = Callable[[Office], tuple[str, list[dict[str, Any]]]]
"""Adds the errand to the office; returns the user's request and the hidden goals."""

_TOPICS = [
    ("budget review", "budget"), ("Q3 roadmap", "roadmap"), ("hiring plan", "hiring"),
    ("launch checklist", "launch"), ("vendor contract", "vendor"), ("offsite agenda", "offsite"),
    ("pricing update", "pricing"), ("security audit", "audit"),
]  # fmt: skip


def time_mentions(hhmm: str) -> list[str]:
    """Ways an email can state a time so that it counts as stating it (compared case-insensitively)."""
    hour, minute = divmod(minutes(hhmm), 60)
    twelve, half = hour % 12 or 12, "am" if hour < 12 else "pm"
    forms = [
        hhmm,
        f"{twelve}:{minute:02d} {half}",
        f"{twelve}:{minute:02d}{half}",
        f"{twelve}:{minute:02d} {half[0]}.m.",
    ]
    if minute == 0:
        forms += [f"{twelve} {half}", f"{twelve}{half}", f"{twelve} {half[0]}.m."]
    if hour < 10:
        forms.append(f"{hour}:{minute:02d}")
    return forms


def meeting_from_email(office: Office) -> tuple[str, list[dict[str, Any]]]:
    rng = office.rng
    person, other = rng.sample(office.colleagues, 2)
    (topic, keyword), (second_topic, _) = rng.sample(_TOPICS, 2)
    day, decoy_day, other_day = (office.day(offset) for offset in rng.sample(range(1, 5), 3))
    duration = rng.choice([30, 60])
    ask = "could we get together about the {0} on {1}? Any time that day works for me."
    office.mail(person, topic.capitalize(), f"Hi {office.owner.first}, {ask.format(topic, office.say(day))}")
    office.mail(other, topic.capitalize(), f"Hi, {ask.format(topic, office.say(decoy_day))} {other.first}")
    office.mail(
        person, second_topic.capitalize(), f"Hello! {ask.format(second_topic, office.say(other_day))}"
    )
    office.fill_morning(day)
    start = office.first_free(day, duration)
    prompt = rng.choice(
        [
            f"Find the email from {person.first} about the {topic} and put a {duration}-minute meeting with "
            "them on the day they propose, at the first free slot.",
            f"{person.first} wrote to me about the {topic}. Book {duration} minutes with them on the date "
            "they suggested, in the earliest free slot that day.",
            f"Set up the {topic} meeting {person.name} asked for by email: {duration} minutes, on the day in "
            "their email, first free time.",
        ]
    )
    end = clock(minutes(start) + duration)
    goal = {"kind": "event", "title_keywords": [keyword], "date": day.isoformat(), "start": start, "end": end,
            "attendees": [person.email], "first_free": True}  # fmt: skip
    return prompt, [goal]


def reply_with_time(office: Office) -> tuple[str, list[dict[str, Any]]]:
    rng = office.rng
    person = rng.choice(office.colleagues)
    title = rng.choice(
        [t for t in MEETING_TITLES if all(t not in office.titles_on(office.day(i)) for i in range(5))]
    )
    day, decoy_day = (office.day(offset) for offset in rng.sample(range(5), 2))
    event = office.place(day, rng.choice([30, 60]), title, [person])
    decoy = office.place(decoy_day, 60, title, [person])
    if event is None or decoy is None or decoy["start"] == event["start"]:
        raise Retry("the decoy must start at another time")
    office.mail(
        person, f"{title} time?", f"Quick question: what time does the {title} on {office.say(day)} start?"
    )
    prompt = rng.choice(
        [
            f"{person.first} emailed me a question about one of my meetings. Look up the answer in my "
            "calendar and reply to them.",
            f"Answer {person.name}'s email about a meeting time.",
            f"Reply to {person.first}'s question in my inbox; check my calendar first.",
        ]
    )
    return prompt, [{"kind": "email", "to": [person.email], "mentions": time_mentions(event["start"])}]


def complete_from_email(office: Office) -> tuple[str, list[dict[str, Any]]]:
    rng = office.rng
    person, other = rng.sample(office.colleagues, 2)
    target, decoy = rng.sample([todo["title"] for todo in office.todos], 2)
    done = f"I took care of '{target.lower()}' for you, so you can tick it off your list."
    office.mail(person, f"Re: {target}", f"Hi {office.owner.first}, {done}")
    office.mail(other, f"Re: {decoy}", f"I haven't got to '{decoy.lower()}' yet, will do it next week.")
    prompt = rng.choice(
        [
            f"{person.first} emailed to say one of my tasks has been taken care of. Mark it as done.",
            f"Check my inbox: {person.name} finished something on my task list. Tick it off.",
            f"Update my task list based on {person.first}'s latest email.",
        ]
    )
    return prompt, [{"kind": "todo_done", "title": target}]


def cancel_and_notify(office: Office) -> tuple[str, list[dict[str, Any]]]:
    rng = office.rng
    title = rng.choice(
        [t for t in MEETING_TITLES if all(t not in office.titles_on(office.day(i)) for i in range(5))]
    )
    day, decoy_day = (office.day(offset) for offset in rng.sample(range(5), 2))
    invited = rng.sample(office.colleagues, rng.randint(2, 3))
    office.place(day, rng.choice([30, 60]), title, invited)
    office.place(decoy_day, 60, title, rng.sample(office.colleagues, 2))
    said = office.say(day)
    prompt = rng.choice(
        [
            f"The {title} on {said} is off. Cancel it and email everyone who was invited to let them know.",
            f"Please cancel my {title} on {said} and tell the attendees by email that it is cancelled.",
            f"{title} ({said}) won't happen. Remove it from my calendar and notify the invitees.",
        ]
    )
    goals: list[dict[str, Any]] = [
        {"kind": "cancelled", "title": title, "date": day.isoformat()},
        {"kind": "email", "to": [person.email for person in invited], "mentions": ["cancel", "called off"]},
    ]
    return prompt, goals


def reschedule(office: Office) -> tuple[str, list[dict[str, Any]]]:
    rng = office.rng
    person = rng.choice(office.colleagues)
    title = rng.choice(
        [t for t in MEETING_TITLES if all(t not in office.titles_on(office.day(i)) for i in range(5))]
    )
    day, new_day = (office.day(offset) for offset in sorted(rng.sample(range(5), 2)))
    attendees = [person, *rng.sample([p for p in office.colleagues if p != person], rng.randint(0, 1))]
    event = office.place(day, 60, title, attendees)
    if event is None or not office.is_free(new_day, event["start"], event["end"]):
        raise Retry("the new day must be free at the same time")
    office.mail(person, f"Move {title}?", f"Could we move our {title} from {office.say(day)} to "
                f"{office.say(new_day)}? Same time works for me.")  # fmt: skip
    prompt = rng.choice(
        [
            f"{person.first} asked by email to move one of our meetings. Please do it: cancel the old event "
            "and create one on the new day with the same title, time and attendees.",
            f"Handle {person.name}'s reschedule request from my inbox (same time and attendees, new day).",
        ]
    )
    goals = [
        {"kind": "cancelled", "title": title, "date": day.isoformat()},
        {"kind": "event", "title_keywords": [title], "date": new_day.isoformat(), "start": event["start"],
         "end": event["end"], "attendees": event["attendees"]},
    ]  # fmt: skip
    return prompt, goals


def book_with_people(office: Office) -> tuple[str, list[dict[str, Any]]]:
    rng = office.rng
    first, second = rng.sample(office.colleagues, 2)
    for person in (first, second):
        if all(email["sender"] != person.email for email in office.emails):
            office.mail(person, "Quick hello", "Looking forward to working together this quarter.")
    topic, keyword = rng.choice(_TOPICS)
    day, duration = office.day(rng.randint(0, 4)), rng.choice([30, 60, 90])
    office.fill_morning(day)
    start = office.first_free(day, duration)
    prompt = (
        f"Book a {duration}-minute meeting about the {topic} with {first.name} and {second.name} on "
        f"{office.say(day)} at the first free slot. Their addresses are in my inbox."
    )
    end = clock(minutes(start) + duration)
    goal = {"kind": "event", "title_keywords": [keyword], "date": day.isoformat(), "start": start, "end": end,
            "attendees": [first.email, second.email], "first_free": True}  # fmt: skip
    return prompt, [goal]


def finish_and_tell(office: Office) -> tuple[str, list[dict[str, Any]]]:
    rng = office.rng
    person = rng.choice(office.colleagues)
    open_titles = [todo["title"] for todo in office.todos]
    target = rng.choice([title for title in TODO_TITLES if title in open_titles])
    office.mail(person, f"{target}?", f"Any news on '{target.lower()}'? Let me know when it's done.")
    prompt = rng.choice(
        [
            f"I've just finished '{target.lower()}'. Mark it done on my list and let {person.first} know by "
            "email, since they asked.",
            f"Tick off '{target}' in my tasks, then email {person.name} that it's done.",
        ]
    )
    goals: list[dict[str, Any]] = [
        {"kind": "todo_done", "title": target},
        {"kind": "email", "to": [person.email], "mentions": ["done", "finished", "complete", target.lower()]},
    ]
    return prompt, goals


SCENARIOS: tuple[Scenario, ...] = (
    meeting_from_email, reply_with_time, complete_from_email, cancel_and_notify, reschedule, book_with_people,
    finish_and_tell,
)  # fmt: skip
