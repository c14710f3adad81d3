"""The `terminal` environment: golden transcripts and reference solutions on both sandbox backends,
state-based scoring, the dataset's determinism, bad inline tasks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from envreplay import REQUIRED_KINDS, load_golden, replay
from envsandbox import BACKENDS, installed_backend

from gym_env_terminal import generate
from gym_env_terminal.checks import TerminalAnswer, score_state
from gym_env_terminal.env import TerminalEnv
from gym_server.core.errors import InvalidRequest
from gym_server.sdk.messages import tool_call_message
from gym_server.sdk.registry import Registry
from gym_server.sdk.tasks import DATASETS_ROOT, holdout_split, render_jsonl

GOLDEN = load_golden(
    Path(__file__).resolve().parent.parent / "gym_env_terminal" / "fixtures" / "golden.jsonl"
)
TASKS = TerminalEnv.dataset().tasks()
# Docker replays a subset (a start costs seconds there): the full score, the symlink and the hedge;
# bubblewrap replays every case, twice for the first (determinism).
ON_DOCKER = {"full_reference_solution", "zero_symlink_instead_of_file", "hedged_several_numbers"}


def test_dataset_is_the_generators_output() -> None:
    assert TerminalEnv.dataset().split_sizes() == {"train": 96, "validation": 24}
    splits = holdout_split(generate.build_tasks(), generate.VALIDATION_EVERY)
    for split, tasks in splits.items():
        path = DATASETS_ROOT / "terminal" / f"{split}.jsonl"
        assert render_jsonl(tasks) == path.read_bytes()
    assert {task.metadata["family"] for task in TASKS} == {f.__name__.lstrip("_") for f in generate.FAMILIES}
    Registry([TerminalEnv])


def test_golden_fixtures_cover_the_required_kinds() -> None:
    assert {case["kind"] for case in GOLDEN} >= REQUIRED_KINDS
    assert [case["expected_reward"] for case in GOLDEN if case["kind"] == "full"] == [1.0, 1.0]


@pytest.mark.parametrize("kind", BACKENDS)
async def test_golden_fixtures_replay_to_their_reward(kind: str) -> None:
    async with installed_backend(kind):
        results = {}
        for case in [case for case in GOLDEN if kind == "bubblewrap" or case["name"] in ON_DOCKER]:
            result = results[case["name"]] = await replay(
                TerminalEnv, case["task_id"], case["seed"], case["messages"]
            )
            assert result.reward == case["expected_reward"], (case["name"], result.info)
            for name, value in case["expected_components"].items():
                assert result.components[name] == pytest.approx(value), case["name"]
            assert result.failure is None
        if kind == "bubblewrap":
            again = await replay(TerminalEnv, GOLDEN[0]["task_id"], 0, GOLDEN[0]["messages"])
            assert again == results[GOLDEN[0]["name"]]


@pytest.mark.parametrize("kind", BACKENDS)
async def test_the_reference_solution_of_every_family_scores_one(kind: str) -> None:
    firsts = {task.metadata["family"]: task for task in reversed(TASKS)}
    async with installed_backend(kind):
        for family, task in sorted(firsts.items()):
            result = await replay(TerminalEnv, task.id, 3, TerminalEnv(task, 3).reference_solution())
            assert result.reward == 1.0, (family, result.info)


class _Quick(TerminalEnv):
    command_timeout_s = 2.0


@pytest.mark.parametrize("kind", BACKENDS)
async def test_a_command_that_hangs_is_stopped_and_the_shell_keeps_working(kind: str) -> None:
    async with installed_backend(kind):
        env = _Quick(TASKS[0], 0)
        await env.reset()
        try:
            hung = await env.step(tool_call_message("run", {"command": "sleep 60 & wait"}, "c1"))
            assert "[stopped after 2 s]" in hung.messages[0]["content"]
            listing = await env.step(tool_call_message("run", {"command": "ls"}, "c2"))
            assert "logs.tar.gz" in listing.messages[0]["content"]
            net = await env.step(
                tool_call_message(
                    "run",
                    {"command": "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 80), 2)'"},
                    "c3",
                )
            )
            assert "[exit 1]" in net.messages[0]["content"]
        finally:
            await env.close()


def test_scoring_reads_only_the_snapshot() -> None:
    answer = TerminalAnswer.model_validate(
        {"checks": [{"kind": "file", "path": "out.txt", "content": "7"}, {"kind": "absent", "path": "x.tmp"}]}
    )
    state: dict[str, Any] = {
        "files": {"out.txt": {"type": "file", "text": "7  \n\n"}, "x.tmp": {"type": "absent"}},
        "dirs": {},
        "archives": {},
    }
    assert score_state(answer.checks, state) == [True, True]
    state["files"]["out.txt"] = {"type": "link"}
    assert score_state(answer.checks, state) == [False, True]


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ({"checks": []}, "answer.checks"),
        ({"checks": [{"kind": "file", "path": "../etc/passwd", "content": ""}]}, "answer.checks"),
        ({"checks": [{"kind": "nope", "path": "a"}]}, "answer.checks"),
    ],
)
def test_bad_inline_tasks_are_refused_naming_the_field(answer: dict[str, Any], problem: str) -> None:
    with pytest.raises(InvalidRequest) as raised:
        TerminalEnv.inline_task({"id": "t", "prompt": "do it", "answer": answer})
    assert problem in str(raised.value.detail)
