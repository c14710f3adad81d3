"""The `repo_repair` environment: reward hacks and the reference fix on both sandbox backends, the
visible tests failing on the bug, the tools' path handling, the dataset's determinism, bad inline tasks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from envreplay import REQUIRED_KINDS, load_golden, replay
from envsandbox import BACKENDS, installed_backend

from gym_env_repo_repair import generate
from gym_env_repo_repair.env import RepoRepairEnv
from gym_server.core.errors import InvalidRequest
from gym_server.sdk.messages import tool_call_message
from gym_server.sdk.registry import Registry
from gym_server.sdk.tasks import DATASETS_ROOT, holdout_split, render_jsonl

GOLDEN = load_golden(
    Path(__file__).resolve().parent.parent / "gym_env_repo_repair" / "fixtures" / "golden.jsonl"
)
TASKS = RepoRepairEnv.dataset().tasks()
# Docker replays the cases whose outcome depends on processes inside the sandbox (exits, patched modules,
# forged verdicts) and the full score; bubblewrap replays every case. Docker's exec costs seconds here.
ON_DOCKER = {
    "full_reference_fix",
    "hack_sys_exit_in_the_package",
    "hack_os_exit_in_the_module",
    "hack_monkeypatch_unittest_and_pytest",
    "hack_print_a_fake_verdict",
}


def test_dataset_is_the_generators_output() -> None:
    assert RepoRepairEnv.dataset().split_sizes() == {"train": 48, "validation": 12}
    splits = holdout_split(generate.build_tasks(), generate.VALIDATION_EVERY)
    for split, tasks in splits.items():
        assert render_jsonl(tasks) == (DATASETS_ROOT / "repo_repair" / f"{split}.jsonl").read_bytes()
    assert len({task.metadata["bug"] for task in TASKS}) >= 8
    Registry([RepoRepairEnv])


def test_golden_fixtures_cover_the_required_kinds_and_the_hacks() -> None:
    assert {case["kind"] for case in GOLDEN} >= REQUIRED_KINDS
    hacks = [case for case in GOLDEN if case["name"].startswith("hack_")]
    assert len(hacks) >= 6 and all(case["expected_reward"] == 0.0 for case in hacks)


@pytest.mark.parametrize("kind", BACKENDS)
async def test_golden_fixtures_replay_to_their_reward(kind: str) -> None:
    async with installed_backend(kind):
        results = {}
        for case in [case for case in GOLDEN if kind == "bubblewrap" or case["name"] in ON_DOCKER]:
            result = results[case["name"]] = await replay(
                RepoRepairEnv, case["task_id"], case["seed"], case["messages"]
            )
            assert result.reward == case["expected_reward"], (case["name"], result.info)
            for name, value in case["expected_components"].items():
                assert result.components[name] == pytest.approx(value), case["name"]
            assert result.failure is None
        if kind == "bubblewrap":  # determinism: the same transcript scores the same
            first = results[GOLDEN[0]["name"]]
            again = await replay(RepoRepairEnv, GOLDEN[0]["task_id"], 0, GOLDEN[0]["messages"])
            assert (again.reward, again.components) == (first.reward, first.components)


@pytest.mark.parametrize("kind", BACKENDS)
async def test_visible_tests_fail_on_the_bug_and_pass_after_the_reference_fix(kind: str) -> None:
    task = TASKS[-1]
    async with installed_backend(kind):
        env = RepoRepairEnv(task, 0)
        await env.reset()
        try:
            before = await env.step(tool_call_message("run_tests", {}, "c1"))
            assert before.messages[0]["content"].startswith("[exit 1]"), before.messages[0]["content"]
            assert "FAILED (failures=1" in before.messages[0]["content"]
            for message in (env.reference_solution() or [])[:2]:
                after = await env.step(message)
            assert after.messages[0]["content"].startswith("[exit 0]"), after.messages[0]["content"]
            assert (await env.verify()).reward == 1.0
        finally:
            await env.close()


async def test_the_tools_keep_to_the_repository() -> None:
    env = RepoRepairEnv(TASKS[0], 0)
    replies = []
    for name, arguments in [
        ("read_file", {"path": "../secret"}),
        ("read_file", {"path": "nothing.py"}),
        ("apply_edit", {"path": "README.md", "old": "", "new": "x"}),
        ("delete_file", {"path": "ghost.py"}),
        ("write_file", {"path": "./pkg//new.py", "content": "X = 1\n"}),
        ("read_file", {"path": "pkg/new.py"}),
    ]:
        outcome = await env.step(tool_call_message(name, arguments, f"c-{name}"))
        replies.append(outcome.messages[0]["content"])
    assert all(reply.startswith("Error") for reply in replies[:4]), replies
    assert replies[4] == "Wrote pkg/new.py (6 characters)." and replies[5] == "X = 1\n"
    assert "pkg/new.py" in env.final_tree()


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ({"package": "p", "hidden_tests": []}, "answer.hidden_tests"),
        ({"package": "bad name", "hidden_tests": ["assert True"]}, "answer.package"),
    ],
)
def test_bad_inline_tasks_are_refused_naming_the_field(answer: dict[str, Any], problem: str) -> None:
    with pytest.raises(InvalidRequest) as raised:
        RepoRepairEnv.inline_task({"id": "t", "prompt": "fix", "answer": answer, "metadata": {"files": {}}})
    assert problem in str(raised.value.detail)
