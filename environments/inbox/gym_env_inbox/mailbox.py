"""A generated mailbox: a year of mail for one person, rebuilt from a seed at every reset.

`build_mailbox(seed, size)` is a pure function: the same seed and size give the same messages, ids and
order in any process, so a dataset stores only the seed and the question (`questions.py` plants the
messages a question needs into the background made here). Background mail is what buries the answer:
project chatter, meeting notes, shipping and booking notices with codes shaped like the ones questions
ask for, newsletters and lunch plans, from a few dozen colleagues and a handful of services.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, timedelta
from random import Random
from typing import Any

__all__ = [
    "CITIES",
    "FIRST_NAMES",
    "LAST_NAMES",
    "PROJECTS",
    "ROOMS",
    "VENDORS",
    "YEAR",
    "Email",
    "Mailbox",
    "Person",
    "build_mailbox",
    "code",
]

YEAR = 2024
COMPANY = "northwind.test"
FIRST_NAMES = (
    "Ava", "Ben", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hugo", "Iris", "Jonas", "Kira", "Liam",
    "Maya", "Nikhil", "Olga", "Pablo", "Quinn", "Rosa", "Samir", "Tara", "Umar", "Vera", "Wes", "Ximena",
    "Yusuf", "Zoe", "Amir", "Bianca", "Carlos", "Dana",
)  # fmt: skip
LAST_NAMES = (
    "Abbott", "Brennan", "Castillo", "Dubois", "Eriksen", "Fischer", "Gupta", "Hayes", "Ibarra", "Jensen",
    "Kowalski", "Lindqvist", "Moreau", "Nakamura", "Okafor", "Petrov", "Quintero", "Rossi", "Santos",
    "Tanaka", "Ulrich", "Varga", "Whitfield", "Xu", "Yilmaz", "Zhou",
)  # fmt: skip
PROJECTS = (
    "Falcon", "Juniper", "Atlas", "Beacon", "Cobalt", "Driftwood", "Ember", "Granite", "Harbor", "Indigo",
    "Kestrel", "Lantern", "Meridian", "Nimbus", "Orchid", "Pioneer", "Quartz", "Redwood", "Sequoia",
    "Tundra",
)  # fmt: skip
CITIES = (
    "Lisbon", "Osaka", "Denver", "Nairobi", "Oslo", "Bogota", "Dublin", "Hanoi", "Montreal", "Seville",
    "Krakow", "Perth", "Cairo", "Tallinn", "Quito",
)  # fmt: skip
ROOMS = (
    "Birch", "Cedar", "Maple", "Willow", "Aspen", "Hazel", "Rowan", "Alder", "Elm", "Larch", "Spruce",
    "Poplar",
)  # fmt: skip
VENDORS = (
    "Brightline Catering", "Keystone Legal", "Summit Cloud", "Vantage Print", "Northgate Security",
    "Bluewave Logistics", "Crescent Design", "Ironwood Facilities",
)  # fmt: skip
_TOPICS = ("data engineering", "product design", "remote work", "security", "leadership", "cloud costs")
_DISHES = ("ramen", "tacos", "the salad place", "dumplings", "pizza", "the new Thai spot")
_CHATTER = (
    "Quick update on {project}: we closed {n} tickets this week and the demo is on track.",
    "The {project} build is red again, I think it is the flaky integration test. Looking into it.",
    "Can you take a look at the {project} design doc when you have a minute? No rush.",
    "FYI the {project} retro moved to next week. Same time.",
    "I pushed the {project} changes we discussed; {n} files touched, tests pass.",
)
_CODE_LETTERS = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"


@dataclass(frozen=True, slots=True)
class Person:
    first: str
    last: str
    address: str

    @property
    def name(self) -> str:
        return f"{self.first} {self.last}"


@dataclass(slots=True)
class Email:
    """One message. `date` is `YYYY-MM-DDTHH:MM` (sorts as text); `thread` groups replies."""

    id: str
    sender: Person
    to: tuple[str, ...]
    date: str
    subject: str
    body: str
    thread: str

    def summary(self) -> dict[str, Any]:
        snippet = self.body if len(self.body) <= 90 else self.body[:87] + "..."
        return {
            "id": self.id,
            "from": f"{self.sender.name} <{self.sender.address}>",
            "date": self.date,
            "subject": self.subject,
            "snippet": snippet,
        }

    def full(self) -> dict[str, Any]:
        return {**self.summary(), "to": list(self.to), "body": self.body, "thread": self.thread}

    def haystack(self) -> str:
        return f"{self.sender.name} {self.sender.address} {self.subject} {self.body}".casefold()


@dataclass(slots=True)
class Mailbox:
    """The owner, the people they hear from, and every message (newest first once `seal`ed)."""

    owner: Person
    colleagues: list[Person]
    services: dict[str, Person]
    rng: Random
    emails: list[Email] = field(default_factory=list)
    _ids: set[str] = field(default_factory=set)

    def new_id(self) -> str:
        while True:
            identifier = f"m{self.rng.getrandbits(32):08x}"
            if identifier not in self._ids:
                self._ids.add(identifier)
                return identifier

    def when(self, day: date | None = None) -> str:
        """A timestamp on `day` (a random day of the year when None) in office hours."""
        if day is None:
            day = date(YEAR, 1, 1) + timedelta(days=self.rng.randrange(366))
        return f"{day.isoformat()}T{self.rng.randrange(7, 20):02d}:{self.rng.randrange(60):02d}"

    def add(
        self,
        sender: Person,
        subject: str,
        body: str,
        *,
        when: str | None = None,
        thread: str | None = None,
        to: tuple[str, ...] | None = None,
    ) -> Email:
        identifier = self.new_id()
        email = Email(
            identifier,
            sender,
            to or (self.owner.address,),
            when or self.when(),
            subject,
            body,
            thread or f"t{identifier[1:]}",
        )
        self.emails.append(email)
        return email

    def others(self, *excluded: Person) -> list[Person]:
        return [person for person in self.colleagues if person not in excluded]

    def seal(self) -> None:
        """Newest first, ties broken by id: the order search results use."""
        self.emails.sort(key=lambda email: (email.date, email.id), reverse=True)

    def by_id(self) -> dict[str, Email]:
        return {email.id: email for email in self.emails}


def code(rng: Random, length: int = 6) -> str:
    """A booking- or tracking-style code such as `QX7R2P`."""
    return "".join(rng.choice(_CODE_LETTERS) for _ in range(length))


def build_mailbox(seed: int, size: int, *, avoid: frozenset[str] = frozenset()) -> Mailbox:
    """`size` background messages for a fresh owner; `avoid` lists projects and cities kept out of them.

    A question keeps its own project or city out of the background's booking and budget mail, so the
    only messages that state its facts are the ones it plants (and their planted distractors).
    """
    rng = Random(f"inbox-mailbox\x00{seed}")
    people = _people(rng, 24)
    owner, colleagues = people[0], people[1:]
    services = {
        "travel": Person("Skyway", "Travel", "bookings@skyway-travel.test"),
        "shop": Person("Parcel", "Point", "orders@parcelpoint.test"),
        "news": Person("Weekly", "Digest", "digest@techweekly.test"),
        "it": Person("IT", "Helpdesk", f"helpdesk@{COMPANY}"),
        "hr": Person("People", "Team", f"people@{COMPANY}"),
    }
    mailbox = Mailbox(owner, colleagues, services, rng)
    projects = [project for project in PROJECTS if project not in avoid]
    cities = [city for city in CITIES if city not in avoid]
    writers = (_chatter, _notes, _shipping, _booking, _digest, _lunch, _helpdesk, _budget_talk, _expense)
    weights = (24, 12, 12, 6, 10, 8, 8, 8, 6)
    for _ in range(size):
        rng.choices(writers, weights)[0](mailbox, projects, cities)
    return mailbox


def _people(rng: Random, count: int) -> list[Person]:
    pairs = rng.sample([(first, last) for first in FIRST_NAMES for last in LAST_NAMES], count)
    return [Person(first, last, f"{first}.{last}@{COMPANY}".lower()) for first, last in pairs]


def _chatter(mailbox: Mailbox, projects: list[str], _cities: list[str]) -> None:
    rng, person, project = mailbox.rng, mailbox.rng.choice(mailbox.colleagues), mailbox.rng.choice(projects)
    line = rng.choice(_CHATTER).format(project=project, n=rng.randrange(2, 40))
    subject = rng.choice(("{} update", "Re: {}", "{} status", "Question about {}")).format(project)
    mailbox.add(person, subject, f"Hi {mailbox.owner.first},\n\n{line}\n\n{person.first}")


def _notes(mailbox: Mailbox, projects: list[str], _cities: list[str]) -> None:
    rng, person, project = mailbox.rng, mailbox.rng.choice(mailbox.colleagues), mailbox.rng.choice(projects)
    room = rng.choice(ROOMS)
    body = (
        f"Notes from today's {project} sync in {room}:\n- {rng.randrange(2, 6)} open risks, none blocking\n"
        f"- next milestone review in {rng.randrange(2, 5)} weeks\n- {rng.choice(mailbox.colleagues).first} "
        "owns the follow-ups"
    )
    mailbox.add(person, f"{project} sync notes", body)


def _shipping(mailbox: Mailbox, _projects: list[str], _cities: list[str]) -> None:
    rng = mailbox.rng
    item = rng.choice(("USB-C hub", "desk lamp", "monitor arm", "keyboard", "headset", "backpack"))
    days = rng.randrange(2, 6)
    body = f"Your order of a {item} has shipped. Tracking code: {code(rng)}. Expected in {days} days."
    mailbox.add(mailbox.services["shop"], f"Your {item} is on its way", body)


def _booking(mailbox: Mailbox, _projects: list[str], cities: list[str]) -> None:
    rng, city = mailbox.rng, mailbox.rng.choice(cities)
    body = (
        f"Thank you for booking with Skyway. Your trip to {city} is confirmed.\n"
        f"Confirmation code: {code(rng)}\nTravellers: {mailbox.owner.name}"
    )
    mailbox.add(mailbox.services["travel"], f"Booking confirmed: {city}", body)


def _digest(mailbox: Mailbox, _projects: list[str], _cities: list[str]) -> None:
    rng = mailbox.rng
    topic = rng.choice(_TOPICS)
    body = (
        f"This week in {topic}: {rng.randrange(3, 12)} stories you may have missed, a long read on budgets "
        f"and approvals, and a conference discount code {code(rng, 8)}."
    )
    mailbox.add(mailbox.services["news"], f"Tech Weekly: {topic}", body)


def _lunch(mailbox: Mailbox, _projects: list[str], _cities: list[str]) -> None:
    rng, person = mailbox.rng, mailbox.rng.choice(mailbox.colleagues)
    day = rng.choice(("Monday", "Tuesday", "Wednesday", "Thursday", "Friday"))
    dish, room = rng.choice(_DISHES), rng.choice(ROOMS)
    body = f"Lunch on {day}? I was thinking {dish} around 12:30, we could meet by {room}."
    mailbox.add(person, "Lunch?", body)


def _helpdesk(mailbox: Mailbox, _projects: list[str], _cities: list[str]) -> None:
    rng = mailbox.rng
    body = (
        f"Ticket {rng.randrange(10000, 99999)} has been updated: your laptop is scheduled for a patch. "
        f"Please keep it on overnight. Reference {code(rng)}."
    )
    mailbox.add(mailbox.services["it"], "Helpdesk ticket update", body)


def _budget_talk(mailbox: Mailbox, projects: list[str], _cities: list[str]) -> None:
    rng, person, project = mailbox.rng, mailbox.rng.choice(mailbox.colleagues), mailbox.rng.choice(projects)
    amount = rng.randrange(5, 200) * 500
    body = (
        f"Rough numbers for {project}: I think we will need about ${amount:,} next quarter, mostly "
        "contractors. Nothing approved yet, just planning."
    )
    mailbox.add(person, f"{project} budget planning", body)


def _expense(mailbox: Mailbox, _projects: list[str], _cities: list[str]) -> None:
    rng, person = mailbox.rng, mailbox.rng.choice(mailbox.colleagues)
    receipts, total = rng.randrange(2, 9), rng.randrange(40, 900)
    body = f"Hi, attached is my expense report ({receipts} receipts, ${total}). Thanks!"
    mailbox.add(
        person, f"Expense report {rng.choice(('travel', 'client dinner', 'conference', 'supplies'))}", body
    )
