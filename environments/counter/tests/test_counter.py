"""The counter environment: golden fixtures, determinism, and the tool errors a model sees."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gym_env_counter.env import CounterEnv

GOLDEN = [
    json.loads(line)
    for line in (Path(__file__).parent.parent / "gym_env_counter" / "fixtures" / "golden.jsonl").open()
]


async def replay(case: dict[str, Any]) -> tuple[float, list[dict[str, Any]]]:
    task = CounterEnv.dataset().get(case["task_id"])
    assert task is not None
    env = CounterEnv(task, case["seed"])
    await env.reset()
    for message in case["assistant"]:
        if env.done:
            break
        await env.step(json.loads(json.dumps(message)))
    result = await env.verify()
    return result.reward, env.messages


@pytest.mark.parametrize("case", GOLDEN, ids=[case["name"] for case in GOLDEN])
async def test_golden_fixture(case: dict[str, Any]) -> None:
    reward, _ = await replay(case)
    assert reward == case["reward"]


async def test_replay_is_deterministic() -> None:
    for case in GOLDEN:
        assert await replay(case) == await replay(case)


async def test_same_task_and_seed_give_same_start_and_other_seeds_differ() -> None:
    task = CounterEnv.dataset().tasks("train")[0]
    starts = set()
    for seed in range(8):
        first, second = CounterEnv(task, seed), CounterEnv(task, seed)
        await first.reset()
        await second.reset()
        assert first.value == second.value
        starts.add(first.value)
    assert len(starts) > 1


async def test_tool_errors_are_messages_and_the_episode_goes_on() -> None:
    env = CounterEnv(CounterEnv.dataset().tasks("train")[0], 0)
    await env.reset()
    outcome = await env.step(
        {
            "role": "assistant",
            "tool_calls": [
                {"function": {"name": "add", "arguments": '{"amount": 99}'}},
                {"function": {"name": "add", "arguments": "[1]"}},
                {"function": {"name": "read", "arguments": '{"extra": 1}'}},
            ],
        }
    )
    texts = [message["content"] for message in outcome.messages]
    assert "between -10 and 10" in texts[0]
    assert "must be a JSON object" in texts[1]
    assert "extra" in texts[2]
    assert not outcome.done


def test_every_task_has_an_integer_target() -> None:
    tasks = CounterEnv.dataset().tasks()
    assert len(tasks) == 60
    assert all(isinstance(task.answer, int) for task in tasks)
