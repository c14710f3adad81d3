"""The `workplace` state: a calendar, an inbox, a task list and the outbox, built per episode.

A task's public `metadata["world"]` describes the starting state that matters (who sent what, what is
booked, what is open). `Workspace.build` turns it into live state and uses the episode's seeded `rng`
for everything that must not matter: the ids, the order of the inbox, and some noise (newsletters,
weekend plans, unrelated to-dos) that a careful agent ignores. So a seed changes the surface of an
episode but never its solution, and the same task and seed always give the same state.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from datetime import date, timedelta
from random import Random
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

__all__ = [
    "DAY_END",
    "DAY_START",
    "SLOT_STEP",
    "Clock",
    "Day",
    "Email",
    "Event",
    "Sent",
    "TodoItem",
    "Workspace",
    "WorldSpec",
    "clock",
    "minutes",
    "parse_date",
    "parse_time",
]

DAY_START = 9 * 60
DAY_END = 17 * 60
SLOT_STEP = 30
"""Free slots start on this grid (minutes) inside working hours, DAY_START to DAY_END."""

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_TIME = re.compile(r"^([01]\d|2[0-3]):[0-5]\d$")


def _real_day(text: str) -> str:
    day = parse_date(text)
    if day is None:
        raise ValueError("must be a real day written YYYY-MM-DD")
    return day


def _clock_time(text: str) -> str:
    value = parse_time(text)
    if value is None:
        raise ValueError("must be a 24-hour time written HH:MM")
    return value


# Dates and times in a task's world and goals: checked when the task is, so a bad one is a 422 naming
# the field rather than a crash when the episode starts or is scored.
Day = Annotated[str, AfterValidator(_real_day)]
Clock = Annotated[str, AfterValidator(_clock_time)]

_NOISE_EMAILS = [
    ("digest@news.acme.test", "Acme Weekly", "Your weekly digest", "Ten stories from around the company."),
    ("facilities@acme.test", "Facilities", "Fire drill on Thursday", "Please leave by the nearest exit."),
    ("it@acme.test", "IT Helpdesk", "Password expiry notice", "Your password expires in 14 days."),
    ("canteen@acme.test", "Canteen", "This week's menu", "Soup of the day is lentil."),
    ("hr@acme.test", "People Team", "Benefits enrolment", "Enrolment closes at the end of the month."),
]
_NOISE_EVENTS = [
    ("Gym", "10:00", "11:00"),
    ("Brunch with family", "11:30", "13:00"),
    ("Farmers market", "09:00", "10:00"),
]
_NOISE_TODOS = ["Renew gym membership", "Order printer paper", "Update laptop OS"]


class EventSpec(BaseModel):
    """A starting calendar event; times are HH:MM, attendees are addresses other than the user's."""

    model_config = ConfigDict(extra="forbid")

    title: str
    date: Day
    start: Clock
    end: Clock
    attendees: list[str] = Field(default_factory=list)


class EmailSpec(BaseModel):
    """A starting inbox email."""

    model_config = ConfigDict(extra="forbid")

    sender: str
    sender_name: str
    subject: str
    body: str
    date: Day


class TodoSpec(BaseModel):
    """A starting to-do (the tools call them tasks; "to-do" keeps them apart from dataset tasks)."""

    model_config = ConfigDict(extra="forbid")

    title: str
    due: Day
    done: bool = False


class WorldSpec(BaseModel):
    """The starting state a task describes, in `metadata["world"]`."""

    model_config = ConfigDict(extra="forbid")

    owner: str = Field(description="the user's own address")
    today: Day = Field(description="YYYY-MM-DD; always the Monday of the week the task is about")
    events: list[EventSpec] = Field(default_factory=list)
    emails: list[EmailSpec] = Field(default_factory=list)
    todos: list[TodoSpec] = Field(default_factory=list)


@dataclass(slots=True)
class Event:
    """A live calendar event; cancelling marks it, so the verifier can still see what was cancelled."""

    id: str
    title: str
    date: str
    start: str
    end: str
    attendees: list[str]
    cancelled: bool = False

    def public(self) -> dict[str, Any]:
        """What the calendar tools show."""
        return {"id": self.id, "title": self.title, "date": self.date, "start": self.start, "end": self.end,
                "attendees": self.attendees}  # fmt: skip


@dataclass(slots=True)
class Email:
    """A live inbox email."""

    id: str
    sender: str
    sender_name: str
    subject: str
    body: str
    date: str

    def summary(self) -> dict[str, str]:
        """What a search result shows; `read_email` adds the body."""
        return {
            "id": self.id,
            "from": f"{self.sender_name} <{self.sender}>",
            "subject": self.subject,
            "date": self.date,
        }


@dataclass(slots=True)
class TodoItem:
    """A live to-do."""

    id: str
    title: str
    due: str
    done: bool

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "due": self.due,
            "status": "done" if self.done else "open",
        }


@dataclass(slots=True)
class Sent:
    """An email the agent sent."""

    to: list[str]
    subject: str
    body: str


@dataclass(slots=True)
class Workspace:
    """The live state of one episode, and what it looked like at the start."""

    owner: str
    today: str
    events: dict[str, Event] = field(default_factory=dict)
    inbox: dict[str, Email] = field(default_factory=dict)
    todos: dict[str, TodoItem] = field(default_factory=dict)
    sent: list[Sent] = field(default_factory=list)
    initial_events: frozenset[str] = frozenset()
    initially_done: frozenset[str] = frozenset()

    @classmethod
    def build(cls, world: WorldSpec, rng: Random) -> Workspace:
        """Live state from the spec; `rng` draws the ids, the inbox order and the noise."""
        ids = _IdMaker(rng)
        workspace = cls(owner=world.owner, today=world.today)
        weekend = [
            (date.fromisoformat(world.today) + timedelta(days=offset)).isoformat() for offset in (5, 6)
        ]
        events = [spec.model_dump() for spec in world.events]
        for title, start, end in rng.sample(_NOISE_EVENTS, rng.randint(1, 2)):
            events.append(
                {"title": title, "date": rng.choice(weekend), "start": start, "end": end, "attendees": []}
            )
        for spec in events:
            event = Event(id=ids.make("evt"), **spec)
            workspace.events[event.id] = event
        emails = [spec.model_dump() for spec in world.emails]
        for sender, name, subject, body in rng.sample(_NOISE_EMAILS, rng.randint(2, 4)):
            emails.append(
                {"sender": sender, "sender_name": name, "subject": subject, "body": body, "date": world.today}
            )
        rng.shuffle(emails)
        for spec in sorted(emails, key=lambda email: email["date"], reverse=True):
            email = Email(id=ids.make("msg"), **spec)
            workspace.inbox[email.id] = email
        todos = [spec.model_dump() for spec in world.todos]
        todos += [
            {"title": title, "due": weekend[0], "done": False}
            for title in rng.sample(_NOISE_TODOS, rng.randint(0, 2))
        ]
        rng.shuffle(todos)
        for spec in todos:
            todo = TodoItem(id=ids.make("task"), **spec)
            workspace.todos[todo.id] = todo
        workspace.initial_events = frozenset(workspace.events)
        workspace.initially_done = frozenset(key for key, todo in workspace.todos.items() if todo.done)
        return workspace

    def snapshot(self) -> dict[str, Any]:
        """The whole state as plain data (for tests and debugging)."""
        return {
            "events": [asdict(event) for event in self.events.values()],
            "inbox": [asdict(email) for email in self.inbox.values()],
            "todos": [asdict(todo) for todo in self.todos.values()],
            "sent": [asdict(sent) for sent in self.sent],
        }

    def events_on(self, day: str) -> list[Event]:
        """The live events of one day, by start time."""
        found = [event for event in self.events.values() if event.date == day and not event.cancelled]
        return sorted(found, key=lambda event: (event.start, event.end, event.title))

    def first_free_slot(self, day: str, duration: int) -> str | None:
        """The earliest start on the slot grid where `duration` minutes fit in working hours, or None."""
        busy = [(minutes(event.start), minutes(event.end)) for event in self.events_on(day)]
        for start in range(DAY_START, DAY_END - duration + 1, SLOT_STEP):
            if all(start >= end or start + duration <= begin for begin, end in busy):
                return clock(start)
        return None

    def new_event_id(self, rng: Random) -> str:
        return _IdMaker(rng, taken=set(self.events)).make("evt")


class _IdMaker:
    """Short random ids, unique within one workspace."""

    def __init__(self, rng: Random, taken: set[str] | None = None) -> None:
        self.rng = rng
        self.taken = taken if taken is not None else set()

    def make(self, prefix: str) -> str:
        while True:
            candidate = f"{prefix}-{self.rng.randrange(16**4):04x}"
            if candidate not in self.taken:
                self.taken.add(candidate)
                return candidate


def minutes(hhmm: str) -> int:
    """Minutes since midnight of an HH:MM time."""
    hours, mins = hhmm.split(":")
    return int(hours) * 60 + int(mins)


def clock(total: int) -> str:
    """HH:MM of minutes since midnight."""
    return f"{total // 60:02d}:{total % 60:02d}"


def parse_date(text: str) -> str | None:
    """The date if `text` is a real YYYY-MM-DD date, else None."""
    if not _DATE.match(text):
        return None
    try:
        return date.fromisoformat(text).isoformat()
    except ValueError:
        return None


def parse_time(text: str) -> str | None:
    """The time if `text` is a 24-hour HH:MM time, else None."""
    return text if _TIME.match(text) else None
