"""The generator's model of one office week, from which a `workplace` task's world is written.

`Office.create` draws a Monday, the user, four or five colleagues, a calendar of ordinary meetings,
a to-do list and some routine mail. Scenarios (`scenarios.py`) then add what their errand needs and
read answers off the same state with the environment's own rules (`Workspace.first_free_slot`), so a
goal can never disagree with what the tools will show.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, timedelta
from random import Random
from typing import Any

from gym_env_workplace.world import (
    DAY_END,
    DAY_START,
    SLOT_STEP,
    Event,
    Workspace,
    clock,
    minutes,
)

__all__ = ["MEETING_TITLES", "TODO_TITLES", "Office", "Person", "Retry"]

_NAMES = [
    ("Dana", "Kim"), ("Ravi", "Patel"), ("Lena", "Vogel"), ("Tariq", "Aziz"), ("Mei", "Chen"),
    ("Jonas", "Berg"), ("Ada", "Obi"), ("Carlos", "Ruiz"), ("Nora", "Quinn"), ("Felix", "Wagner"),
    ("Iris", "Moreau"), ("Yusuf", "Demir"), ("Ella", "Brooks"), ("Hugo", "Laine"), ("Sara", "Lind"),
    ("Paul", "Adeyemi"),
]  # fmt: skip
_OWNERS = [("Alex", "Morgan"), ("Jamie", "Rivera"), ("Robin", "Hale"), ("Casey", "Ito")]

MEETING_TITLES = [
    "Design review", "Team sync", "Customer call", "Sprint planning", "Roadmap review", "Interview loop",
    "Lunch and learn", "Ops review", "Partner check-in", "Architecture forum", "Marketing sync", "Retro",
]  # fmt: skip
TODO_TITLES = [
    "Submit expense report", "Review Q3 slides", "Book venue for offsite", "Sign vendor contract",
    "Update onboarding doc", "Send invoice to Northwind", "Renew software licences", "Prepare board memo",
    "Draft hiring plan", "Order team laptops", "Approve travel budget", "File security review",
]  # fmt: skip
_MORNING = ["Standup", "Focus time", "Inbox zero", "Coffee with mentor"]
_SMALL_TALK = [
    ("Notes from today", "Thanks for the chat earlier, notes are in the shared folder."),
    ("Coffee?", "Fancy a coffee sometime this week?"),
    ("Article you might like", "Saw this piece on team rituals and thought of you."),
    ("Out on Friday", "Heads up: I'm out on Friday, back Monday."),
]


class Retry(Exception):
    """The draw cannot host the scenario (a day too full, say); the generator draws again."""


@dataclass(frozen=True, slots=True)
class Person:
    first: str
    last: str

    @property
    def name(self) -> str:
        return f"{self.first} {self.last}"

    @property
    def email(self) -> str:
        return f"{self.first.lower()}.{self.last.lower()}@acme.test"


@dataclass
class Office:
    """One week's calendar, inbox and to-dos as plain data, plus the helpers scenarios need."""

    rng: Random
    monday: date
    owner: Person
    colleagues: list[Person]
    events: list[dict[str, Any]] = field(default_factory=list)
    emails: list[dict[str, Any]] = field(default_factory=list)
    todos: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def create(cls, rng: Random) -> Office:
        monday = date(2025, 1, 6) + timedelta(weeks=rng.randrange(50))
        people = [Person(first, last) for first, last in rng.sample(_NAMES, 5)]
        office = cls(rng, monday, Person(*rng.choice(_OWNERS)), people)
        for offset in range(5):
            for title in rng.sample(MEETING_TITLES, rng.randint(1, 3)):
                duration = rng.choice([30, 60, 90])
                office.place(
                    office.day(offset), duration, title, rng.sample(people, rng.randint(1, 2)), strict=False
                )
        for title in rng.sample(TODO_TITLES, rng.randint(3, 4)):
            office.todos.append(
                {"title": title, "due": office.day(rng.randint(0, 4)).isoformat(), "done": False}
            )
        for person in rng.sample(people, 2):
            office.mail(person, *rng.choice(_SMALL_TALK))
        return office

    def world(self) -> dict[str, Any]:
        """The task's `metadata["world"]`."""
        return {
            "owner": self.owner.email,
            "today": self.monday.isoformat(),
            "events": self.events,
            "emails": self.emails,
            "todos": self.todos,
        }

    def day(self, offset: int) -> date:
        return self.monday + timedelta(days=offset)

    def say(self, day: date) -> str:
        """A weekday date as colleagues write it; the year is this week's."""
        return self.rng.choice(
            [f"{day:%A} {day.day} {day:%B}", f"{day:%A}, {day:%B} {day.day}", f"{day:%a} {day.isoformat()}"]
        )

    def mail(self, sender: Person, subject: str, body: str) -> None:
        sent = self.monday - timedelta(days=self.rng.randint(0, 3))
        self.emails.append(
            {"sender": sender.email, "sender_name": sender.name, "subject": subject, "body": body,
             "date": sent.isoformat()}
        )  # fmt: skip

    def titles_on(self, day: date) -> set[str]:
        return {event["title"] for event in self.events if event["date"] == day.isoformat()}

    def place(
        self, day: date, duration: int, title: str, attendees: list[Person], *, strict: bool = True
    ) -> dict[str, Any] | None:
        """Add an event at a random free start that day; None (or `Retry` when `strict`) if none fits."""
        starts = [start for start in self._free_starts(day, duration) if title not in self.titles_on(day)]
        if not starts:
            if strict:
                raise Retry(f"no room for {title!r} on {day}")
            return None
        start = self.rng.choice(starts)
        event: dict[str, Any] = {"title": title, "date": day.isoformat(), "start": clock(start)}
        event |= {"end": clock(start + duration), "attendees": [person.email for person in attendees]}
        self.events.append(event)
        return event

    def fill_morning(self, day: date) -> None:
        """Book the start of the day for up to three hours, so the first free slot is rarely just 09:00."""
        start = DAY_START
        for title in self.rng.sample(_MORNING, self.rng.randint(1, 3)):
            duration = self.rng.choice([30, 60])
            if self.is_free(day, clock(start), clock(start + duration)) and title not in self.titles_on(day):
                self.events.append({"title": title, "date": day.isoformat(), "start": clock(start),
                                    "end": clock(start + duration), "attendees": []})  # fmt: skip
            start += duration

    def is_free(self, day: date, start: str, end: str) -> bool:
        return all(
            minutes(start) >= minutes(event["end"]) or minutes(end) <= minutes(event["start"])
            for event in self.events
            if event["date"] == day.isoformat()
        )

    def first_free(self, day: date, duration: int) -> str:
        """The slot `find_free_slot` will report, by the environment's own rule."""
        start = self._workspace().first_free_slot(day.isoformat(), duration)
        if start is None:
            raise Retry(f"no free {duration}-minute slot on {day}")
        return start

    def _free_starts(self, day: date, duration: int) -> list[int]:
        return [
            start
            for start in range(DAY_START, DAY_END - duration + 1, SLOT_STEP)
            if self.is_free(day, clock(start), clock(start + duration))
        ]

    def _workspace(self) -> Workspace:
        events = {f"e{index}": Event(id=f"e{index}", **event) for index, event in enumerate(self.events)}
        return Workspace(owner=self.owner.email, today=self.monday.isoformat(), events=events)
