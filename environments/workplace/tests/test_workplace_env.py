"""The `workplace` environment: golden transcripts, an oracle on every task, bad policies and bad input."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from gym_env_workplace import generate
from gym_env_workplace.env import WorkplaceEnv
from gym_env_workplace.goals import (
    CancelledGoal,
    EmailGoal,
    EventGoal,
    TodoGoal,
    WorkplaceAnswer,
)
from gym_env_workplace.scenarios import SCENARIOS
from gym_env_workplace.world import minutes
from gym_server.sdk.messages import Message
from gym_server.sdk.registry import Registry
from gym_server.sdk.tasks import Task, holdout_split, render_jsonl

FIXTURES = Path(__file__).resolve().parent.parent / "gym_env_workplace" / "fixtures" / "golden.jsonl"
GOLDEN = [orjson.loads(line) for line in FIXTURES.read_bytes().splitlines() if line.strip()]
TASKS = WorkplaceEnv.dataset().tasks()
_ids = itertools.count()


def _call(name: str, arguments: dict[str, Any] | str | None = None) -> dict[str, Any]:
    raw = arguments if isinstance(arguments, str) else orjson.dumps(arguments or {}).decode()
    call = {"id": f"call_{next(_ids)}", "type": "function", "function": {"name": name, "arguments": raw}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


async def _env(task_id: str, seed: int | None = 0) -> WorkplaceEnv:
    task = WorkplaceEnv.dataset().get(task_id)
    assert task is not None
    env = WorkplaceEnv(task, seed)
    await env.reset()
    return env


async def _step(env: WorkplaceEnv, message: dict[str, Any]) -> list[str]:
    """Step a message as the server would receive it (validated) and return the reply texts."""
    outcome = await env.step(Message.model_validate(message).to_dict())
    return [str(reply["content"]) for reply in outcome.messages]


async def _tool(env: WorkplaceEnv, name: str, **arguments: Any) -> Any:
    [text] = await _step(env, _call(name, arguments))
    assert not text.startswith("Error"), text
    return orjson.loads(text) if text[:1] in "[{" else text


async def _oracle(env: WorkplaceEnv) -> None:
    """Solve the task from its hidden goals, finding ids and free slots through the tools like an agent."""
    goals = WorkplaceAnswer.model_validate(env.task.answer).goals
    for goal in goals:
        if isinstance(goal, CancelledGoal):
            listing = await _tool(env, "list_events", date=goal.date)
            [event_id] = [event["id"] for event in listing["events"] if event["title"] == goal.title]
            await _tool(env, "cancel_event", event_id=event_id)
    for goal in goals:
        if isinstance(goal, EventGoal):
            start = goal.start
            if goal.first_free:  # the tool must agree with the generator's answer for a reward of 1
                duration = minutes(goal.end) - minutes(goal.start)
                start = (await _tool(env, "find_free_slot", date=goal.date, duration_minutes=duration))[
                    "start"
                ]
            title = " ".join(goal.title_keywords).capitalize()
            await _tool(
                env,
                "create_event",
                title=title,
                date=goal.date,
                start=start,
                end=goal.end,
                attendees=goal.attendees,
            )
        elif isinstance(goal, TodoGoal):
            listing = await _tool(env, "list_tasks", status="open")
            [task_id] = [todo["id"] for todo in listing["tasks"] if todo["title"] == goal.title]
            await _tool(env, "complete_task", task_id=task_id)
        elif isinstance(goal, EmailGoal):
            await _tool(env, "send_email", to=goal.to, subject="Update", body=f"Hi, {goal.mentions[0]}.")
    await _tool(env, "submit")


@pytest.mark.parametrize("case", GOLDEN, ids=[case["name"] for case in GOLDEN])
async def test_golden_fixtures_replay_to_their_reward(case: dict[str, Any]) -> None:
    env = await _env(case["task_id"], case["seed"])
    for message in case["messages"]:
        if env.done:
            break
        await _step(env, message)
    result = await env.verify()
    assert result.reward == pytest.approx(case["expected_reward"], abs=1e-6)
    assert result.components == pytest.approx(case["expected_components"], abs=1e-6)


def test_golden_fixtures_cover_full_zero_and_malformed() -> None:
    by_name = {case["name"]: case["expected_reward"] for case in GOLDEN}
    assert by_name["full_score_lookup_then_book"] == 1.0
    assert by_name["zero_score_submit_at_once"] == 0.0
    assert by_name["malformed_calls_then_prose"] == 0.0


@pytest.mark.parametrize("task", TASKS, ids=[task.id for task in TASKS])
@pytest.mark.parametrize("seed", [0, 7])
async def test_oracle_solves_every_task(task: Task, seed: int) -> None:
    env = WorkplaceEnv(task, seed)
    await env.reset()
    await _oracle(env)
    result = await env.verify()
    assert env.done and env.done_reason == "submitted"
    assert result.reward == 1.0, result.info


async def test_same_task_and_seed_give_the_same_state_and_score() -> None:
    case = GOLDEN[0]
    snapshots, results = [], []
    for _ in range(2):
        env = await _env(case["task_id"], case["seed"])
        snapshots.append((env.messages[:], env.workspace.snapshot()))
        for message in case["messages"]:
            await _step(env, message)
        results.append(await env.verify())
    assert snapshots[0] == snapshots[1]
    assert results[0] == results[1]
    other = await _env(case["task_id"], seed=1)
    assert (
        other.workspace.snapshot()["events"] != snapshots[0][1]["events"]
    )  # ids and noise move with the seed


def test_dataset_shape_and_generator() -> None:
    assert WorkplaceEnv.dataset().split_sizes() == {"train": 112, "validation": 28}
    assert sorted(task.id for task in TASKS) == [f"workplace-{number:05d}" for number in range(140)]
    for split in ("train", "validation"):
        assert {task.metadata["scenario"] for task in WorkplaceEnv.dataset().tasks(split)} == {
            s.__name__ for s in SCENARIOS
        }
    for name, tasks in holdout_split(generate.build_tasks(), generate.VALIDATION_EVERY).items():
        assert (WorkplaceEnv.dataset().folder / f"{name}.jsonl").read_bytes() == render_jsonl(tasks)


def test_registration_and_catalog() -> None:
    assert "workplace" in Registry([WorkplaceEnv])
    names = {schema["function"]["name"] for schema in WorkplaceEnv.catalog_tools()}
    assert len(names) == 10 and "submit" in names
    assert WorkplaceEnv.multi_turn and WorkplaceEnv.max_turns == 20


async def test_doing_nothing_scores_zero_everywhere() -> None:
    for task in TASKS:
        env = WorkplaceEnv(task, 0)
        await env.reset()
        await _step(env, {"role": "assistant", "content": "All done!"})
        assert env.done and (await env.verify()).reward == 0.0


async def test_scorched_earth_scores_low() -> None:
    """Cancel every event of the week and complete every task: cancellation goals are met, little else."""
    rewards = []
    for task in TASKS[::4]:
        env = WorkplaceEnv(task, 0)
        await env.reset()
        for event in list(env.workspace.events.values()):
            await _step(env, _call("cancel_event", {"event_id": event.id}))
        for todo in list(env.workspace.todos.values()):
            await _step(env, _call("complete_task", {"task_id": todo.id}))
        rewards.append((await env.verify()).reward)
    assert max(rewards) < 0.5 and sum(rewards) / len(rewards) < 0.1


async def test_collateral_is_counted_and_capped() -> None:
    env = await _env("workplace-00000")
    for day in range(12, 16):
        await _tool(
            env,
            "create_event",
            title="Extra",
            date=f"2025-05-{day}",
            start="09:00",
            end="09:30",
            attendees=[],
        )
    await _tool(env, "send_email", to=["stranger@elsewhere.test"], subject="Hi", body="Hello")
    result = await env.verify()
    assert len(result.info["collateral"]) == 5
    assert result.reward == 0.0 and result.components["collateral"] == 0.0  # nothing earned, nothing to take
    undone = await _env("workplace-00000")
    created = await _tool(
        undone, "create_event", title="Oops", date="2025-05-09", start="16:00", end="16:30", attendees=[]
    )
    await _tool(undone, "cancel_event", event_id=created["created"]["id"])
    assert (await undone.verify()).info["collateral"] == []  # created then cancelled leaves no trace


async def test_tools_behave_and_errors_explain_themselves() -> None:
    env = await _env("workplace-00000")
    assert (await _tool(env, "search_inbox", query="RAVI checklist"))["results"][0]["id"] == "msg-6a34"
    assert len((await _tool(env, "search_inbox", query=""))["results"]) == len(env.workspace.inbox)
    open_tasks = (await _tool(env, "list_tasks"))["tasks"]
    assert open_tasks and all(todo["status"] == "open" for todo in open_tasks)
    first = open_tasks[0]["id"]
    await _tool(env, "complete_task", task_id=first)
    assert [todo["id"] for todo in (await _tool(env, "list_tasks", status="done"))["tasks"]] == [first]
    errors = {
        "complete_task": {"task_id": first},
        "read_email": {"email_id": "msg-zzzz"},
        "cancel_event": {"event_id": "evt-zzzz"},
        "list_events": {"date": "2025-02-30"},
        "find_free_slot": {"date": "2025-05-09", "duration_minutes": 0},
        "send_email": {"to": ["not an address"], "subject": "s", "body": "b"},
    }
    for name, arguments in errors.items():
        [text] = await _step(env, _call(name, arguments))
        assert text.startswith("Error:") and len(text) < 400, text
    [text] = await _step(env, _call("create_event", {"title": "T", "date": "2025-05-09", "start": "11:00",
                                                     "end": "10:00", "attendees": []}))  # fmt: skip
    assert "must be after start" in text


BAD_MESSAGES: list[dict[str, Any]] = [
    _call("rm_rf", {"path": "/"}),
    _call("list_events", '{"date": 2025-05-09'),
    _call("list_events", "[1, 2, 3]"),
    _call("list_events", {"date": "2025-05-09", "extra": True}),
    {"role": "assistant", "content": None, "tool_calls": _call("list_tasks")["tool_calls"] * 1000},
    _call("search_inbox", {"query": "\x00" * 100}),
    _call("send_email", {"to": ["a@b.test"], "subject": "\x00", "body": "x" * 1_000_000}),
    _call("search_inbox", {"query": "y" * 5_000_000}),
    _call(
        "create_event",
        {"title": "x" * 501, "date": "2025-05-09", "start": "10:00", "end": "11:00", "attendees": []},
    ),
    _call(
        "create_event",
        {"title": "t", "date": "2025-05-09", "start": "25:00", "end": "26:00", "attendees": []},
    ),
    _call("find_free_slot", '{"date": "2025-05-09", "duration_minutes": 1' + "0" * 30 + "}"),
    _call("list_tasks", {"status": "everything"}),
    {"role": "assistant", "content": "\x00" * 10_000},
]


@pytest.mark.parametrize("message", BAD_MESSAGES, ids=range(len(BAD_MESSAGES)))
async def test_bad_input_never_raises(message: dict[str, Any]) -> None:
    env = await _env("workplace-00000")
    before = env.workspace.snapshot()
    texts = await _step(env, message)
    assert all(len(text) < 5000 for text in texts)
    result = await env.verify()
    assert 0.0 <= result.reward <= 1.0
    if message.get("tool_calls"):
        assert env.workspace.snapshot()["events"] == before["events"]


async def test_many_calls_in_one_message_are_capped() -> None:
    env = await _env("workplace-00000")
    message = {"role": "assistant", "content": None, "tool_calls": _call("list_tasks")["tool_calls"] * 1000}
    texts = await _step(env, message)
    assert len(texts) == 1000
    assert Counter(text.startswith("Error: not executed") for text in texts) == {False: 32, True: 968}
