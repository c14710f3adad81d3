"""The `support` environment: golden transcripts, the reference agent on every task, the scripted
baseline, the simulated user's rules, the dataset's determinism, bad inline tasks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from envreplay import REQUIRED_KINDS, load_golden, replay

from gym_env_support import generate
from gym_env_support.env import SupportEnv
from gym_env_support.reference import compliant_messages
from gym_server.core.errors import InvalidRequest
from gym_server.sdk.registry import Registry
from gym_server.sdk.tasks import DATASETS_ROOT, holdout_split, render_jsonl

GOLDEN = load_golden(Path(__file__).resolve().parent.parent / "gym_env_support" / "fixtures" / "golden.jsonl")
TASKS = SupportEnv.dataset().tasks()


def test_dataset_is_the_generators_output() -> None:
    assert SupportEnv.dataset().split_sizes() == {"train": 96, "validation": 24}
    splits = holdout_split(generate.build_tasks(), generate.VALIDATION_EVERY)
    for split, tasks in splits.items():
        assert render_jsonl(tasks) == (DATASETS_ROOT / "support" / f"{split}.jsonl").read_bytes()
    for split in ("train", "validation"):
        assert {t.metadata["scenario"] for t in SupportEnv.dataset().tasks(split)} == set(generate.SCENARIOS)
    Registry([SupportEnv])


def test_golden_fixtures_cover_the_required_kinds() -> None:
    assert {case["kind"] for case in GOLDEN} >= REQUIRED_KINDS


@pytest.mark.parametrize("case", GOLDEN, ids=[case["name"] for case in GOLDEN])
async def test_golden_fixtures_replay_to_their_reward_twice(case: dict[str, Any]) -> None:
    first = await replay(SupportEnv, case["task_id"], case["seed"], case["messages"])
    assert first.reward == case["expected_reward"], first.info
    for name, value in case["expected_components"].items():
        assert first.components[name] == value, name
    assert await replay(SupportEnv, case["task_id"], case["seed"], case["messages"]) == first


async def test_the_reference_agent_scores_one_on_every_task() -> None:
    for task in TASKS:
        result = await replay(SupportEnv, task.id, 0, SupportEnv(task, 0).reference_solution())
        assert result.reward == 1.0, (task.id, result.info)


async def test_the_compliant_baseline_scores_only_on_requests_the_policy_allows() -> None:
    validation = SupportEnv.dataset().tasks("validation")
    rewards = {
        task.id: (await replay(SupportEnv, task.id, 0, compliant_messages(task))).reward
        for task in validation
    }
    for task in validation:
        assert rewards[task.id] == float(
            task.answer["goal"]["allowed"] and not task.answer["goal"]["transfer"]
        )
    assert sum(rewards.values()) / len(rewards) == 0.375  # the README's baseline


async def test_the_user_reveals_only_what_is_asked_and_leaves_when_declined_twice() -> None:
    task = next(t for t in TASKS if t.metadata["scenario"] == "refund_late")
    env = SupportEnv(task, 0)
    await env.reset()
    replies = []
    for text in ["What is your email?", "And your zip code?", "Sorry, I cannot refund it.", "No, I cannot."]:
        outcome = await env.step({"role": "assistant", "content": text})
        replies.append(outcome.messages[0]["content"])
    user = task.answer["user"]
    assert replies[0] == f"My email is {user['email']}." and replies[1] == f"My zip code is {user['zip']}."
    assert "exception" in replies[2] and env.done and env.done_reason == "user_left"
    # Nothing changed and nothing broken, but the refusal was not grounded (no verification, no look-up):
    # paying it would pay an agent that does nothing on every request the policy refuses.
    result = await env.verify()
    assert result.reward == 0.0 and result.components["db_match"] == 1.0
    assert result.components["checked"] == 0.0 and result.components["verified"] == 0.0


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ({"goal": {"kind": "steal", "order_id": "O-1", "allowed": True}}, "answer.goal.kind"),
        ({}, "answer.user"),
    ],
)
def test_bad_inline_tasks_are_refused_naming_the_field(answer: dict[str, Any], problem: str) -> None:
    with pytest.raises(InvalidRequest) as raised:
        SupportEnv.inline_task({"id": "t", "prompt": "hi", "answer": answer, "metadata": {"db": {}}})
    assert problem in str(raised.value.detail)
