"""The hidden goals of a `workplace` task and how the final state is scored against them.

The verifier looks only at the final state, never at the wording or the path: an event with the right
date, times, attendees and title exists; an email reached the right people and says the right thing;
the right to-do is done; the right event is cancelled. Each goal earns up to `1 / goals`, with partial
credit inside a goal. Collateral damage (an event cancelled or created, a to-do completed, an email sent
that no goal asked for) costs `COLLATERAL_PENALTY` per item, never taking the reward below 0. So the
reward is in [0, 1], and the components sum to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gym_env_workplace.world import Clock, Day, Event, Workspace

__all__ = [
    "COLLATERAL_PENALTY",
    "CancelledGoal",
    "EmailGoal",
    "EventGoal",
    "Goal",
    "GoalReport",
    "TodoGoal",
    "WorkplaceAnswer",
    "score_goals",
]

COLLATERAL_PENALTY = 0.25


class EventGoal(BaseModel):
    """A new event must exist; `first_free` says the start is the first free slot of its length that day."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["event"] = "event"
    title_keywords: list[str] = Field(min_length=1)
    date: Day
    start: Clock
    end: Clock
    attendees: list[str]
    first_free: bool = False


class EmailGoal(BaseModel):
    """Every address in `to` must get an email whose subject or body contains one of `mentions`."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["email"] = "email"
    to: list[str] = Field(min_length=1)
    mentions: list[str] = Field(min_length=1)


class TodoGoal(BaseModel):
    """The open to-do with this title must be done."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["todo_done"] = "todo_done"
    title: str


class CancelledGoal(BaseModel):
    """The event with this title on this date must be cancelled."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["cancelled"] = "cancelled"
    title: str
    date: Day


Goal = Annotated[EventGoal | EmailGoal | TodoGoal | CancelledGoal, Field(discriminator="kind")]


class WorkplaceAnswer(BaseModel):
    """A task's hidden `answer`: the goals, all of which a perfect episode meets."""

    model_config = ConfigDict(extra="forbid")

    goals: list[Goal] = Field(min_length=1)


@dataclass(slots=True)
class GoalReport:
    """Components (`<kind>_<n>` per goal, then `collateral`), the reward and what was found."""

    components: dict[str, float] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    collateral: list[str] = field(default_factory=list)

    @property
    def reward(self) -> float:
        return round(sum(self.components.values()), 6)


def score_goals(goals: list[Goal], workspace: Workspace) -> GoalReport:
    """Score the final `workspace` against `goals` (see the module doc)."""
    report = GoalReport()
    weight = 1.0 / len(goals)
    used_events: set[str] = set()
    cancel_targets: set[str] = set()
    todo_targets: set[str] = set()
    recipients: set[str] = set()
    for number, goal in enumerate(goals, start=1):
        if isinstance(goal, EventGoal):
            score, detail = _event_score(goal, workspace, used_events)
        elif isinstance(goal, EmailGoal):
            recipients.update(address.lower() for address in goal.to)
            score, detail = _email_score(goal, workspace)
        elif isinstance(goal, TodoGoal):
            matching = [todo for todo in workspace.todos.values() if todo.title == goal.title]
            todo_targets.update(todo.id for todo in matching)
            score, detail = (
                float(any(todo.done for todo in matching)),
                {"done": any(t.done for t in matching)},
            )
        else:
            score, detail = _cancel_score(goal, workspace, cancel_targets)
        key = f"{goal.kind}_{number}"
        report.components[key] = round(weight * score, 6)
        report.details[key] = detail
    report.collateral = _collateral(workspace, used_events, cancel_targets, todo_targets, recipients)
    earned = sum(report.components.values())
    penalty = round(min(earned, COLLATERAL_PENALTY * len(report.collateral)), 6)
    report.components["collateral"] = -penalty if penalty else 0.0
    return report


def _event_score(goal: EventGoal, workspace: Workspace, used: set[str]) -> tuple[float, dict[str, Any]]:
    """The best not-yet-used event created in the episode, checked field by field."""
    best_score, best_event, best_checks = 0.0, None, {}
    for candidate in workspace.events.values():
        if candidate.id in workspace.initial_events or candidate.cancelled or candidate.id in used:
            continue
        checks = _event_checks(goal, candidate, workspace.owner)
        score = sum(checks.values()) / len(checks)
        if score > best_score:
            best_score, best_event, best_checks = score, candidate, checks
    if best_event is None:
        return 0.0, {"event": None}
    used.add(best_event.id)
    return best_score, {"event": best_event.id, "checks": best_checks}


def _cancel_score(
    goal: CancelledGoal, workspace: Workspace, targets: set[str]
) -> tuple[float, dict[str, Any]]:
    """Whether a starting event with the goal's title and date is cancelled; records it as a target."""
    matching = [
        event
        for event in workspace.events.values()
        if event.id in workspace.initial_events and (event.title, event.date) == (goal.title, goal.date)
    ]
    targets.update(event.id for event in matching)
    cancelled = any(event.cancelled for event in matching)
    return float(cancelled), {"cancelled": cancelled}


def _event_checks(goal: EventGoal, event: Event, owner: str) -> dict[str, bool]:
    attendees = {address.strip().lower() for address in event.attendees} - {owner.lower()}
    title = event.title.casefold()
    return {
        "date": event.date == goal.date,
        "start": event.start == goal.start,
        "end": event.end == goal.end,
        "attendees": attendees == {address.lower() for address in goal.attendees},
        "title": all(keyword.casefold() in title for keyword in goal.title_keywords),
    }


def _email_score(goal: EmailGoal, workspace: Workspace) -> tuple[float, dict[str, Any]]:
    """Per recipient: half for getting any email, half for one that mentions what it must."""
    mentions = [mention.casefold() for mention in goal.mentions]
    per_recipient: dict[str, float] = {}
    for address in goal.to:
        received = [sent for sent in workspace.sent if address.lower() in {to.lower() for to in sent.to}]
        said = any(
            any(mention in f"{sent.subject}\n{sent.body}".casefold() for mention in mentions)
            for sent in received
        )
        per_recipient[address] = 0.5 * bool(received) + 0.5 * said
    return sum(per_recipient.values()) / len(per_recipient), {"recipients": per_recipient}


def _collateral(
    workspace: Workspace,
    used_events: set[str],
    cancel_targets: set[str],
    todo_targets: set[str],
    recipients: set[str],
) -> list[str]:
    """Everything the episode changed that no goal asked for, one line each."""
    items: list[str] = []
    for event in workspace.events.values():
        if event.id in workspace.initial_events:
            if event.cancelled and event.id not in cancel_targets:
                items.append(f"cancelled {event.id} ({event.title!r} on {event.date})")
        elif event.id not in used_events and not event.cancelled:
            items.append(f"created {event.id} ({event.title[:60]!r} on {event.date[:10]})")
    for todo in workspace.todos.values():
        if todo.done and todo.id not in workspace.initially_done and todo.id not in todo_targets:
            items.append(f"completed {todo.id} ({todo.title!r})")
    for sent in workspace.sent:
        strangers = sorted({address.lower() for address in sent.to} - recipients)
        if strangers:
            items.append(f"emailed {', '.join(address[:60] for address in strangers[:3])}")
    return items
