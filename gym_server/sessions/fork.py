"""Forking an episode at a turn: where a fork starts from, and how its environment reaches that state.

A fork of episode E at turn k is a new live session whose environment is in the state E's was in after
its k-th assistant turn, holding E's transcript up to there (docs/fork.md). The state comes one of two
ways, as the environment's class declares (`Environment.fork_mode`):

- **copy**: `copy_state()` of an instance already in that state (the live session itself when k is its
  current turn, else one replay);
- **replay**: a fresh instance of the same task, seed and environment version (a sandboxed one in a
  fresh sandbox) steps E's recorded assistant messages, and each observation (the opening messages,
  then every turn's replies and whether the episode ended) must equal the recorded one. The first
  difference refuses the fork (`ForkDiverged`, 409, naming turn, message and field): a non-deterministic
  environment says so rather than forking silently wrong.

This module holds the pure parts (the source, splitting a transcript into turns, the comparison, one
verified replay); admission, budgets and bookkeeping are the session manager's (`SessionManager.fork`).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gym_server.core import jsontext
from gym_server.core.errors import EnvironmentNotFound, GymError, InvalidRequest
from gym_server.core.settings import LimitSettings
from gym_server.sdk.environment import Environment, ForkMode
from gym_server.sdk.registry import EnvironmentEntry, Registry
from gym_server.sdk.tasks import Task
from gym_server.sessions.deadlines import step_with_deadline
from gym_server.sessions.live import LiveSession
from gym_server.sessions.replay import stored_task
from gym_server.store.records import INLINE_TASK_KEY, TrajectoryRecord

__all__ = [
    "ForkDiverged",
    "ForkSource",
    "ForkUnavailable",
    "RecordedTurn",
    "build_forks",
    "close_after",
    "close_environments",
    "first_difference",
    "fork_metadata",
    "prefix_length",
    "replay_to_turn",
    "source_from_live",
    "source_from_record",
    "split_turns",
]

# How much of a recorded and a replayed value a divergence shows (the detail names the path anyway).
_SHOWN_CHARS = 200


class ForkDiverged(GymError):
    """Replaying the episode did not reproduce what was recorded: the environment is not deterministic
    (or its state depends on something outside the task and seed), so no fork could be trusted."""

    status = 409
    slug = "fork-diverged"
    title = "The replay diverged"

    def __init__(self, episode_id: str, turn: int, where: str, recorded: Any, replayed: Any) -> None:
        shown_recorded, shown_replayed = _shown(recorded), _shown(replayed)
        super().__init__(
            f"episode {episode_id!r} cannot be forked: replaying it diverged at turn {turn}, {where}: "
            f"recorded {shown_recorded}, replayed {shown_replayed} (the environment is not deterministic "
            "for this task and seed)",
            turn=turn,
            where=where,
            recorded=shown_recorded,
            replayed=shown_replayed,
        )


class ForkUnavailable(GymError):
    """The episode exists but cannot be forked: its environment does not fork, or the version it was
    played on is no longer installed (a replay on other code would not be the same episode)."""

    status = 409
    slug = "fork-unavailable"
    title = "Cannot fork"

    def __init__(self, episode_id: str, reason: str, **extra: Any) -> None:
        super().__init__(f"episode {episode_id!r} cannot be forked: {reason}", **extra)


@dataclass(frozen=True, slots=True)
class RecordedTurn:
    """One assistant turn of a transcript and the messages the environment answered it with."""

    assistant: dict[str, Any]
    replies: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class ForkSource:
    """What forks are built from: the episode's identity and its transcript (a copy, never shared)."""

    id: str
    entry: EnvironmentEntry
    task: Task
    seed: int | None
    messages: list[dict[str, Any]]
    turns: int  # assistant turns the episode has taken
    run: str | None
    policy: dict[str, Any] | None
    metadata: dict[str, Any]

    def check_turn(self, turn: int) -> None:
        """Refuse a turn the episode never reached (422)."""
        if turn > self.turns:
            raise InvalidRequest(
                f"turn {turn} is beyond episode {self.id!r}, which has {self.turns} turns: "
                f"fork at 0..{self.turns}"
            )


async def source_from_live(session: LiveSession) -> ForkSource:
    """The fork source of a live session: its transcript as it stands between two steps."""
    async with session.lock:  # a step appends its message before its replies: never read half a turn
        env = session.env
        messages, turns = list(env.messages), env.turns
    return ForkSource(
        id=session.id,
        entry=session.entry,
        task=env.task,
        seed=env.seed,
        messages=messages,
        turns=turns,
        run=session.run,
        policy=session.policy,
        metadata=session.metadata,
    )


def source_from_record(record: TrajectoryRecord, registry: Registry) -> ForkSource:
    """The fork source of a stored episode, on the environment version it was played on.

    Blocking: a generated dataset makes the task now, so callers on the event loop run it in a thread.

    Raises:
        ForkUnavailable: its environment, that version of it, or its task is no longer installed.
    """
    try:
        entry = registry.get(record.env)
    except EnvironmentNotFound:
        raise ForkUnavailable(record.id, f"environment {record.env!r} is not installed any more") from None
    if entry.version != record.env_version:
        raise ForkUnavailable(
            record.id,
            f"it was played on version {record.env_version} of {record.env!r}, and version {entry.version} "
            "is installed now: a replay on other code would not be the same episode",
            env_version=record.env_version,
            installed_version=entry.version,
        )
    task = stored_task(entry, record)
    if task is None:
        raise ForkUnavailable(record.id, f"task {record.task_id!r} is not in the dataset of {record.env!r}")
    return ForkSource(
        id=record.id,
        entry=entry,
        task=task,
        seed=record.seed,
        messages=record.messages,
        turns=record.num_turns,
        run=record.run,
        policy=record.policy,
        metadata=record.metadata,
    )


def split_turns(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[RecordedTurn]]:
    """A transcript as its opening messages and its turns (each assistant message with its replies)."""
    opening: list[dict[str, Any]] = []
    turns: list[RecordedTurn] = []
    for message in messages:
        if message.get("role") == "assistant":
            turns.append(RecordedTurn(message, []))
        elif turns:
            turns[-1].replies.append(message)
        else:
            opening.append(message)
    return opening, turns


def prefix_length(messages: list[dict[str, Any]], turn: int) -> int:
    """How many messages of a transcript come before its turn `turn + 1`: the opening and `turn` turns
    with their replies (what a fork at `turn` shares with its parent)."""
    opening, turns = split_turns(messages)
    return len(opening) + sum(1 + len(recorded.replies) for recorded in turns[:turn])


def first_difference(recorded: Any, replayed: Any, path: str = "") -> tuple[str, Any, Any] | None:
    """The first place (a JSON path such as `[0].content`) where two JSON values differ, with both values
    there; None when they are equal."""
    if isinstance(recorded, dict) and isinstance(replayed, dict):
        for key in sorted(recorded.keys() | replayed.keys()):
            if key not in recorded or key not in replayed:
                return f"{path}.{key}", recorded.get(key), replayed.get(key)
            found = first_difference(recorded[key], replayed[key], f"{path}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(recorded, list) and isinstance(replayed, list):
        for index, (left, right) in enumerate(zip(recorded, replayed, strict=False)):
            found = first_difference(left, right, f"{path}[{index}]")
            if found is not None:
                return found
        if len(recorded) != len(replayed):
            return f"{path} (length)", len(recorded), len(replayed)
        return None
    if type(recorded) is not type(replayed) or recorded != replayed:
        return path or "(the value)", recorded, replayed
    return None


async def replay_to_turn(env: Environment, source: ForkSource, turn: int, limits: LimitSettings) -> None:
    """Step `env` (just reset) through `source`'s first `turn` assistant messages, checking every
    observation against the recording.

    Raises:
        ForkDiverged: an observation differs, the replay ended early, or a replayed step raised.
    """
    opening, recorded = split_turns(source.messages)
    _compare(source.id, 0, "the opening messages", opening, env.messages)
    for number, recorded_turn in enumerate(recorded[:turn], start=1):
        if env.done:
            raise ForkDiverged(
                source.id, number, "whether the episode had ended", False, f"ended ({env.done_reason})"
            )
        try:
            outcome = await step_with_deadline(env, copy.deepcopy(recorded_turn.assistant), limits)
        except GymError:
            raise  # the server's own refusal (no sandbox free: 429), not the environment's answer
        except Exception as exc:
            raised = f"raised {type(exc).__name__}"
            raise ForkDiverged(source.id, number, "the step", "answered", raised) from exc
        _compare(source.id, number, "the replies", recorded_turn.replies, outcome.messages)


def fork_metadata(source: ForkSource, metadata: dict[str, Any] | None) -> dict[str, Any]:
    """A fork's metadata: the request's, with the source's inline task (which any later replay, re-score
    or fork of the fork starts from); nothing else of the source's is inherited."""
    chosen = dict(metadata or {})
    chosen.pop(INLINE_TASK_KEY, None)
    if INLINE_TASK_KEY in source.metadata:
        chosen[INLINE_TASK_KEY] = source.metadata[INLINE_TASK_KEY]
    return chosen


async def build_forks(
    source: ForkSource,
    turn: int,
    count: int,
    start: Callable[[], Awaitable[Environment]],
    limits: LimitSettings,
    live: LiveSession | None = None,
) -> list[Environment]:
    """`count` environments in the state `source` had after `turn`, or none: whatever was started goes
    back before an error (or a cancellation) propagates. `start` makes a reset instance of the source's
    task and seed; `live` is the source's live session, if it is one.

    Raises:
        ForkDiverged: a replay did not reproduce the recording (the first one's error).
    """
    built: list[Environment] = []
    try:
        if source.entry.cls.fork_mode is ForkMode.COPY:
            await _copies(source, turn, count, start, limits, live, built)
        else:
            # Every replay runs to its end (each bounded by the step deadlines) rather than being
            # cancelled at the first failure: a sandboxed step cancelled mid-call hands its sandbox back
            # only after the answer, and a refusal must leave nothing admitted when it is sent.
            replays = [_replayed(source, turn, start, limits, built) for _ in range(count)]
            failures = [
                outcome
                for outcome in await asyncio.gather(*replays, return_exceptions=True)
                if isinstance(outcome, BaseException)
            ]
            if failures:
                raise failures[0]
    except BaseException:
        await asyncio.shield(close_environments(built, limits.tool_timeout_s))
        raise
    return built


async def _copies(
    source: ForkSource,
    turn: int,
    count: int,
    start: Callable[[], Awaitable[Environment]],
    limits: LimitSettings,
    live: LiveSession | None,
    built: list[Environment],
) -> None:
    """Copy-mode forks into `built`: copies of the live session when it stands at `turn`, else one
    replay and copies of it."""
    if live is not None:
        async with live.lock:  # copied between steps, never half-way through one
            if live.env.turns == turn:
                for _ in range(count):
                    built.append(await live.env.copy_state())
                return
    template = await _replayed(source, turn, start, limits, built)
    for _ in range(count - 1):
        built.append(await template.copy_state())


async def _replayed(
    source: ForkSource,
    turn: int,
    start: Callable[[], Awaitable[Environment]],
    limits: LimitSettings,
    built: list[Environment],
) -> Environment:
    """One fresh instance replayed to `turn`, added to `built` once it is there (closed here if not)."""
    env = await start()
    try:
        await replay_to_turn(env, source, turn, limits)
    except BaseException:
        await asyncio.shield(close_environments([env], limits.tool_timeout_s))
        raise
    built.append(env)
    return env


@contextlib.asynccontextmanager
async def close_after(env: Environment, limits: LimitSettings) -> AsyncIterator[Environment]:
    """`env`, closed (within `tool_timeout_s`, errors not raised) when the block ends, however it ends."""
    try:
        yield env
    finally:
        await asyncio.shield(close_environments([env], limits.tool_timeout_s))


async def close_environments(instances: list[Environment], timeout_s: float) -> None:
    """Close each environment (each within `timeout_s`), whatever the others do; errors are not raised:
    this runs on the way out of a failure, whose own error is the one to report."""
    for instance in instances:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(timeout_s):
                await instance.close()


def _compare(episode_id: str, turn: int, what: str, recorded: Any, replayed: Any) -> None:
    found = first_difference(recorded, replayed)
    if found is not None:
        path, left, right = found
        raise ForkDiverged(episode_id, turn, f"{what}{path}", left, right)


def _shown(value: Any) -> str:
    text = jsontext.dumps(value, default=str).decode(errors="replace")
    return text if len(text) <= _SHOWN_CHARS else f"{text[:_SHOWN_CHARS]}..."
