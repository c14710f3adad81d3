"""The phonebook environment: golden fixtures, seeded extensions, the reference solution, and the errors a
model reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gym_env_phonebook.env import PhonebookEnv
from gym_server.sdk.tasks import Task

GOLDEN = [
    json.loads(line)
    for line in (Path(__file__).parent.parent / "gym_env_phonebook" / "fixtures" / "golden.jsonl").open()
]


async def replay(task_id: str, seed: int, assistant: list[dict[str, Any]]) -> tuple[float, PhonebookEnv]:
    task = PhonebookEnv.dataset().get(task_id)
    assert task is not None
    env = PhonebookEnv(task, seed)
    await env.reset()
    for message in assistant:
        if env.done:
            break
        await env.step(json.loads(json.dumps(message)))
    return (await env.verify()).reward, env


@pytest.mark.parametrize("case", GOLDEN, ids=[case["name"] for case in GOLDEN])
async def test_golden_fixture(case: dict[str, Any]) -> None:
    reward, _ = await replay(case["task_id"], case["seed"], case["assistant"])
    assert reward == case["reward"]


async def test_the_reference_solution_looks_up_then_dials_and_scores_one() -> None:
    for task in PhonebookEnv.dataset().tasks("validation")[:8]:
        for seed in (0, 1):
            env = PhonebookEnv(task, seed)
            await env.reset()
            solution = env.reference_solution()
            assert [m["tool_calls"][0]["function"]["name"] for m in solution] == ["lookup", "dial"]
            reward, played = await replay(task.id, seed, solution)
            assert reward == 1.0 and played.done
            assert played.messages[3]["content"] == str(played.directory[played.person])


async def test_extensions_follow_the_seed_so_a_policy_must_look_them_up() -> None:
    task = PhonebookEnv.dataset().tasks("train")[0]
    extensions = set()
    for seed in range(6):
        first, second = PhonebookEnv(task, seed), PhonebookEnv(task, seed)
        await first.reset()
        await second.reset()
        assert first.directory == second.directory
        extensions.add(first.directory[first.person])
        assert len(str(first.directory[first.person])) == task.answer["digits"]
    assert len(extensions) > 1


async def test_dialling_without_the_right_extension_scores_zero_and_unknown_names_are_messages() -> None:
    task = PhonebookEnv.dataset().tasks("train")[0]
    env = PhonebookEnv(task, 0)
    await env.reset()
    outcome = await env.step(
        {
            "role": "assistant",
            "tool_calls": [{"function": {"name": "lookup", "arguments": '{"name": "Nobody"}'}}],
        }
    )
    assert "no one named 'Nobody'" in outcome.messages[0]["content"] and not outcome.done
    wrong = env.directory[env.person] + 1
    call = {"function": {"name": "dial", "arguments": json.dumps({"extension": wrong})}}
    outcome = await env.step({"role": "assistant", "tool_calls": [call]})
    assert outcome.done
    result = await env.verify()
    assert (
        result.reward == 0.0 and result.components["looked_up"] == 0.0 and result.components["dialled"] == 1.0
    )


def test_the_splits_hold_distinct_people_and_valid_answers() -> None:
    dataset = PhonebookEnv.dataset()
    train, validation = dataset.tasks("train"), dataset.tasks("validation")
    assert (len(train), len(validation)) == (200, 64)
    assert not {t.answer["name"] for t in train} & {t.answer["name"] for t in validation}
    for task in [*train, *validation]:
        PhonebookEnv.check_task(task)


def test_an_inline_task_with_a_bad_answer_is_refused() -> None:
    with pytest.raises(ValueError, match="answer"):
        PhonebookEnv.check_task(Task(id="x", prompt="Call X.", answer={"name": "X", "digits": 9}))
