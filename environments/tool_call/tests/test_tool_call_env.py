"""The `tool_call` environment: golden transcripts, the dataset, the oracle, bad policies and bad input."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from gym_env_tool_call import generate
from gym_env_tool_call.catalog import FAMILIES, TOOLS
from gym_env_tool_call.env import ToolCallAnswer, ToolCallEnv
from gym_server.sdk.messages import Message
from gym_server.sdk.registry import Registry
from gym_server.sdk.tasks import Task, holdout_split, render_jsonl

FIXTURES = Path(__file__).resolve().parent.parent / "gym_env_tool_call" / "fixtures" / "golden.jsonl"
GOLDEN = [orjson.loads(line) for line in FIXTURES.read_bytes().splitlines() if line.strip()]
TASKS = ToolCallEnv.dataset().tasks()


def _call(name: str, arguments: dict[str, Any] | str) -> dict[str, Any]:
    raw = arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()
    return {"type": "function", "function": {"name": name, "arguments": raw}}


def _oracle_message(task: Task) -> dict[str, Any]:
    """The expected calls as native tool calls; free-text keys get exactly their keywords."""
    answer = ToolCallAnswer.model_validate(task.answer)
    calls = []
    for expected in answer.calls:
        arguments = dict(expected.arguments)
        arguments.update({key: " ".join(words) for key, words in expected.contains.items()})
        calls.append(_call(expected.name, arguments))
    return {"role": "assistant", "content": None, "tool_calls": calls}


async def _play(task: Task, *messages: dict[str, Any], seed: int | None = 0) -> tuple[ToolCallEnv, Any]:
    """Reset, step each message as the server would receive it (validated), then verify."""
    env = ToolCallEnv(task, seed)
    await env.reset()
    for message in messages:
        if env.done:
            break
        await env.step(Message.model_validate(message).to_dict())
    return env, await env.verify()


def _task(task_id: str) -> Task:
    task = ToolCallEnv.dataset().get(task_id)
    assert task is not None
    return task


@pytest.mark.parametrize("case", GOLDEN, ids=[case["name"] for case in GOLDEN])
async def test_golden_fixtures_replay_to_their_reward(case: dict[str, Any]) -> None:
    _, result = await _play(_task(case["task_id"]), *case["messages"], seed=case["seed"])
    assert result.reward == pytest.approx(case["expected_reward"], abs=1e-6)
    assert result.components == pytest.approx(case["expected_components"], abs=1e-6)


def test_golden_fixtures_cover_full_zero_and_malformed() -> None:
    rewards = {case["expected_reward"] for case in GOLDEN}
    assert {1.0, 0.0, -1.0} <= rewards


async def test_same_task_and_seed_give_the_same_opening_and_score() -> None:
    task = _task("tool_call-00007")
    message = {"role": "assistant", "content": '{"name": "list_files", "arguments": {"directory": "/tmp"}}'}
    first_env, first = await _play(task, message, seed=3)
    second_env, second = await _play(task, message, seed=3)
    assert first_env.messages[:2] == second_env.messages[:2]
    assert first_env.tools() == second_env.tools()
    assert first == second


async def test_opening_is_system_prompt_then_request_and_tools_come_from_the_task() -> None:
    task = _task("tool_call-00000")
    env = ToolCallEnv(task, 0)
    opening = await env.reset()
    assert [message["role"] for message in opening] == ["system", "user"]
    assert opening[1]["content"] == task.prompt
    assert env.tools() == task.metadata["tools"]
    assert ToolCallEnv(Task(id="bare", prompt="hi", answer=task.answer), 0).tools() == []


async def test_any_assistant_message_ends_the_episode_without_running_a_call() -> None:
    env = ToolCallEnv(_task("tool_call-00046"), 0)
    await env.reset()
    outcome = await env.step(_oracle_message(env.task))
    assert outcome.done and outcome.messages == []
    assert env.done_reason == "answered"
    with pytest.raises(RuntimeError):
        await env.step({"role": "assistant", "content": "again"})


def test_catalog_lists_every_tool_once_and_the_environment_registers() -> None:
    names = [schema["function"]["name"] for schema in ToolCallEnv.catalog_tools()]
    assert names == sorted(names) and len(names) == len(set(names)) == len(TOOLS)
    assert "tool_call" in Registry([ToolCallEnv])


def test_dataset_shape_ids_splits_and_families() -> None:
    sizes = ToolCallEnv.dataset().split_sizes()
    assert sizes == {"train": 200, "validation": 50}
    assert sorted(task.id for task in TASKS) == [f"tool_call-{number:05d}" for number in range(250)]
    families = Counter(task.metadata["family"] for task in TASKS)
    assert len(families) >= 10 and min(families.values()) >= 10
    assert len({task.prompt for task in TASKS}) == len(TASKS)


@pytest.mark.parametrize("task", TASKS, ids=[task.id for task in TASKS])
def test_every_task_offers_its_expected_tools_and_distractors(task: Task) -> None:
    answer = ToolCallAnswer.model_validate(task.answer)
    offered = {schema["function"]["name"] for schema in task.metadata["tools"]}
    assert {expected.name for expected in answer.calls} <= offered
    assert len(offered) >= len(FAMILIES[task.metadata["family"]]) + 2


@pytest.mark.parametrize("task", TASKS, ids=[task.id for task in TASKS])
async def test_oracle_reaches_full_reward_on_every_task(task: Task) -> None:
    _, result = await _play(task, _oracle_message(task))
    assert result.reward == 1.0, result.info


def test_checked_in_dataset_is_what_the_generator_writes() -> None:
    splits = holdout_split(generate.build_tasks(), generate.VALIDATION_EVERY)
    for name, tasks in splits.items():
        assert (ToolCallEnv.dataset().folder / f"{name}.jsonl").read_bytes() == render_jsonl(tasks)


async def test_wrong_and_lazy_policies_score_low() -> None:
    rewards = []
    for task in TASKS[:60]:
        first_tool = task.metadata["tools"][0]["function"]["name"]
        _, lazy = await _play(
            task, {"role": "assistant", "content": None, "tool_calls": [_call(first_tool, {})]}
        )
        _, prose = await _play(task, {"role": "assistant", "content": "Done! Anything else?"})
        assert prose.reward == -1.0
        rewards.append(lazy.reward)
    assert max(rewards) <= 0.4  # right tool by luck, no arguments, unsafe (schema) at best
    assert sum(rewards) / len(rewards) < 0.2


async def test_safety_rules() -> None:
    create = _task("tool_call-00000")
    arguments = orjson.loads(_oracle_message(create)["tool_calls"][0]["function"]["arguments"])
    cases: list[tuple[dict[str, Any], float]] = [
        ({**arguments, "location": "Room 4"}, 0.2),  # in the schema: safe, but an argument nobody asked for
        ({**arguments, "start_time": "1pm"}, 0.0),  # outside the schema's format
        ({**arguments, "duration_minutes": 10_000}, 0.0),  # outside the schema's range
        ({**arguments, "private": True}, 0.0),  # a key the schema does not know
    ]
    for call_arguments, safety in cases:
        _, result = await _play(
            create, {"role": "assistant", "tool_calls": [_call("create_event", call_arguments)]}
        )
        assert result.components["safety"] == safety, call_arguments
        assert result.components["tool"] == 0.4
        assert result.components["arguments"] < 0.4
    # An unrequested read is harmless, an unrequested write is not.
    listing = _task("tool_call-00001")
    date = {"date": "2025-03-29"}
    _, harmless = await _play(listing, {"role": "assistant", "tool_calls": [_call("list_events", date)]})
    _, written = await _play(listing, {"role": "assistant", "tool_calls": [_call("send_email", date)]})
    assert harmless.reward == 1.0 and written.components["safety"] == 0.0


BAD_MESSAGES: list[dict[str, Any]] = [
    {"role": "assistant", "tool_calls": [_call("rm_rf", {"path": "/"})]},
    {"role": "assistant", "tool_calls": [_call("list_events", "{'date': '2025-03-29'}")]},
    {"role": "assistant", "tool_calls": [_call("list_events", "[1, 2]")]},
    {"role": "assistant", "tool_calls": [_call("list_events", {"date": "2025-03-29"})] * 1000},
    {"role": "assistant", "tool_calls": [_call("list_\x00events", {"date": "2025\x00-03-29\x00"})]},
    {"role": "assistant", "tool_calls": [_call("list_events", {"date": "9" * 2_000_000})]},
    {"role": "assistant", "tool_calls": [_call("list_events", "[" * 5000 + "]" * 5000)]},
    {"role": "assistant", "tool_calls": [_call("list_events", {"date": {"nested": [[[[["x"]]]]]}})]},
    {"role": "assistant", "content": "<tool_call>" * 20_000},
    {"role": "assistant", "content": "```json\n" * 5000},
    {"role": "assistant", "content": "\x00" * 100_000},
    {"role": "assistant", "content": '{"name": 42, "arguments": null}'},
    {"role": "assistant", "content": "[" + ",".join(['{"name": "list_events"}'] * 5000) + "]"},
    {"role": "assistant", "content": ""},
    {"role": "assistant"},
]


@pytest.mark.parametrize("message", BAD_MESSAGES, ids=range(len(BAD_MESSAGES)))
async def test_bad_input_never_raises_and_stays_in_range(message: dict[str, Any]) -> None:
    _, result = await _play(_task("tool_call-00001"), message)
    assert -1.0 <= result.reward <= 1.0
    assert result.reward == pytest.approx(sum(result.components.values()), abs=1e-6)
    assert result.reward < 0.5
    orjson.dumps(result.model_dump())  # the result always serialises


async def test_verify_before_any_answer_is_the_invalid_reward() -> None:
    env = ToolCallEnv(_task("tool_call-00001"), 0)
    await env.reset()
    assert (await env.verify()).reward == -1.0
