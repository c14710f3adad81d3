"""The `workplace` environment: a multi-turn assistant with a calendar, an inbox and a task list.

Each task is an errand that needs several tool calls: look something up (an email, an event, a free
slot), then act on it (book, cancel, reply, tick off), then `submit()`. The state lives in memory for
one episode (`world.py`); the verifier scores the final state against hidden goals (`goals.py`), never
the wording, and penalises collateral damage. Tool mistakes come back as `ToolError` text that says
how to fix the call, so a model can recover within the episode.
"""

from __future__ import annotations

from datetime import date as calendar_date
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from gym_env_workplace import goals as goals_module
from gym_env_workplace.goals import WorkplaceAnswer, score_goals
from gym_env_workplace.world import (
    Event,
    Sent,
    Workspace,
    WorldSpec,
    clock,
    minutes,
    parse_date,
    parse_time,
)
from gym_server.sdk.environment import Environment, ForkMode, VerifyResult
from gym_server.sdk.registry import content_hash
from gym_server.sdk.tasks import Task, check_task_field
from gym_server.sdk.tools import ToolError, tool

__all__ = ["WorkplaceEnv"]

Address = Annotated[str, Field(max_length=254)]
Line = Annotated[str, Field(max_length=500)]
Body = Annotated[str, Field(max_length=20_000)]
Recipients = Annotated[list[Address], Field(max_length=20)]
MAX_RESULTS = 20

SYSTEM_PROMPT = (
    "You are the user's executive assistant. You can read and change their calendar, inbox and task list "
    "only through the tools provided. Look things up before you act: find the email, event or task the "
    "request is about, then make exactly the changes it asks for and nothing else (do not cancel, create, "
    "complete or send anything you were not asked to). Dates are YYYY-MM-DD, times are 24-hour HH:MM, "
    "and working hours are 09:00 to 17:00. When the request is fully handled, call submit(); the "
    "episode ends there and your work is checked."
)


class WorkplaceEnv(Environment):
    """Multi-turn errands over a per-episode calendar, inbox and task list, scored on the final state."""

    name = "workplace"
    description = (
        "Multi-turn assistant errands over a calendar, inbox and task list; scored on the final state."
    )
    multi_turn = True
    max_turns = 20
    reward_type = "0..1: goals met in the final calendar and mail state, minus collateral"
    system_prompt = SYSTEM_PROMPT
    # The score depends on this module and on the goal checks: version both.
    verifier_version = content_hash([Path(__file__), Path(goals_module.__file__)])
    # its state is the calendar and mail workspace, plain Python: the default deep copy is exact
    fork_mode = ForkMode.COPY

    workspace: Workspace

    @classmethod
    def check_task(cls, task: Task) -> None:
        """An inline task needs hidden goals (`answer`) and a starting office (`metadata.world`)."""
        check_task_field(WorkplaceAnswer, task.answer, "answer")
        check_task_field(WorldSpec, task.metadata.get("world"), "metadata.world")

    async def setup(self) -> None:
        """Build this episode's office from the task's world; the seeded rng draws ids and noise."""
        self.workspace = Workspace.build(WorldSpec.model_validate(self.task.metadata.get("world")), self.rng)

    def opening_messages(self) -> list[dict[str, Any]]:
        """The system prompt with today's date and the user's address, then the request."""
        today = calendar_date.fromisoformat(self.workspace.today)
        context = (
            f"Today is {today:%A}, {today.isoformat()}. The user's own address is {self.workspace.owner}."
        )
        opening: list[dict[str, Any]] = [{"role": "system", "content": f"{SYSTEM_PROMPT}\n\n{context}"}]
        if isinstance(self.task.prompt, str):
            opening.append({"role": "user", "content": self.task.prompt})
        else:
            opening.extend(dict(message) for message in self.task.prompt)
        return opening

    async def verify(self) -> VerifyResult:
        answer = WorkplaceAnswer.model_validate(self.task.answer)
        report = score_goals(answer.goals, self.workspace)
        info = {"goals": report.details, "collateral": report.collateral, "done_reason": self.done_reason}
        return VerifyResult(reward=report.reward, components=report.components, info=info)

    # -- calendar --------------------------------------------------------------------------------

    @tool
    async def list_events(self, date: Line) -> dict[str, Any]:
        """List the events on one day, earliest first.

        Args:
            date: the day, YYYY-MM-DD
        """
        day = _date(date)
        return {"date": day, "events": [event.public() for event in self.workspace.events_on(day)]}

    @tool
    async def create_event(
        self, title: Line, date: Line, start: Line, end: Line, attendees: Recipients
    ) -> dict[str, Any]:
        """Create a calendar event and invite people (the user attends without being listed).

        Args:
            title: what the event is called
            date: the day, YYYY-MM-DD
            start: start time, 24-hour HH:MM
            end: end time, 24-hour HH:MM, after the start
            attendees: email addresses of the people to invite (may be empty)
        """
        if not title.strip():
            raise ToolError("title must not be empty.")
        day, begin, finish = _date(date), _time(start, "start"), _time(end, "end")
        if minutes(finish) <= minutes(begin):
            raise ToolError(f"end {finish} must be after start {begin}.")
        event = Event(
            self.workspace.new_event_id(self.rng), title.strip(), day, begin, finish, _addresses(attendees)
        )
        overlaps = [
            e.title
            for e in self.workspace.events_on(day)
            if minutes(e.start) < minutes(finish) and minutes(begin) < minutes(e.end)
        ]
        self.workspace.events[event.id] = event
        return {"created": event.public(), "overlaps": overlaps}

    @tool
    async def cancel_event(self, event_id: Line) -> str:
        """Cancel (delete) one event.

        Args:
            event_id: the event's id, as list_events shows it
        """
        event = self.workspace.events.get(event_id.strip())
        if event is None or event.cancelled:
            raise ToolError(
                f"no live event with id {event_id[:40]!r}; list_events(date) shows the ids of a day."
            )
        event.cancelled = True
        return f"Cancelled {event.id} ({event.title} on {event.date} {event.start}-{event.end})."

    @tool
    async def find_free_slot(self, date: Line, duration_minutes: int) -> dict[str, str]:
        """The earliest free slot of a given length in working hours (09:00-17:00), starting on the half hour.

        Args:
            date: the day, YYYY-MM-DD
            duration_minutes: how long the slot must be, 15 to 480
        """
        day = _date(date)
        if not 15 <= duration_minutes <= 480:
            raise ToolError("duration_minutes must be between 15 and 480.")
        start = self.workspace.first_free_slot(day, duration_minutes)
        if start is None:
            raise ToolError(f"no free {duration_minutes}-minute slot on {day} between 09:00 and 17:00.")
        return {"date": day, "start": start, "end": clock(minutes(start) + duration_minutes)}

    # -- inbox -----------------------------------------------------------------------------------

    @tool
    async def search_inbox(self, query: Line) -> dict[str, Any]:
        """Find emails whose sender, subject or text contain every word of the query (newest first).

        Args:
            query: words to look for, e.g. a name or a topic; empty lists the whole inbox
        """
        words = query.casefold().split()
        found = []
        for email in self.workspace.inbox.values():
            haystack = f"{email.sender} {email.sender_name} {email.subject} {email.body}".casefold()
            if all(word in haystack for word in words):
                found.append(email.summary())
        return {
            "query": query[:100],
            "results": found[:MAX_RESULTS],
            "more": max(0, len(found) - MAX_RESULTS),
        }

    @tool
    async def read_email(self, email_id: Line) -> dict[str, str]:
        """Read one email in full.

        Args:
            email_id: the email's id, as search_inbox shows it
        """
        email = self.workspace.inbox.get(email_id.strip())
        if email is None:
            raise ToolError(f"no email with id {email_id[:40]!r}; search_inbox(query) lists ids.")
        return {**email.summary(), "body": email.body}

    @tool
    async def send_email(self, to: Recipients, subject: Line, body: Body) -> str:
        """Send an email from the user.

        Args:
            to: recipient email addresses (at least one)
            subject: the subject line
            body: the message text
        """
        recipients = _addresses(to)
        if not recipients:
            raise ToolError("to needs at least one recipient address.")
        self.workspace.sent.append(Sent(recipients, subject, body))
        return f"Sent {subject[:80]!r} to {', '.join(recipients)}."

    # -- tasks -----------------------------------------------------------------------------------

    @tool
    async def list_tasks(self, status: Literal["open", "done", "all"] = "open") -> dict[str, Any]:
        """List the user's tasks.

        Args:
            status: which tasks to list: open, done or all
        """
        todos = [
            todo.public()
            for todo in self.workspace.todos.values()
            if status == "all" or todo.done == (status == "done")
        ]
        return {"status": status, "tasks": todos}

    @tool
    async def complete_task(self, task_id: Line) -> str:
        """Mark one task as done.

        Args:
            task_id: the task's id, as list_tasks shows it
        """
        todo = self.workspace.todos.get(task_id.strip())
        if todo is None:
            raise ToolError(
                f"no task with id {task_id[:40]!r}; list_tasks() shows the open tasks and their ids."
            )
        if todo.done:
            raise ToolError(f"task {todo.id} ({todo.title}) is already done.")
        todo.done = True
        return f"Marked {todo.id} ({todo.title}) as done."

    @tool
    async def submit(self) -> str:
        """Finish the errand; call it once everything asked for is done. The episode ends."""
        self.finish("submitted")
        return "Submitted."


def _date(text: str) -> str:
    day = parse_date(text.strip())
    if day is None:
        raise ToolError(f"date must be a real day written YYYY-MM-DD (e.g. 2025-03-12), got {text[:40]!r}.")
    return day


def _time(text: str, label: str) -> str:
    value = parse_time(text.strip())
    if value is None:
        raise ToolError(f"{label} must be a 24-hour time written HH:MM (e.g. 14:30), got {text[:40]!r}.")
    return value


def _addresses(addresses: list[str]) -> list[str]:
    cleaned = []
    for address in addresses:
        value = address.strip().lower()
        local, at, domain = value.partition("@")
        if not (local and at and "." in domain) or any(char.isspace() for char in value):
            raise ToolError(
                f"{address[:60]!r} is not an email address; search_inbox(name) shows people's addresses."
            )
        cleaned.append(value)
    return cleaned
