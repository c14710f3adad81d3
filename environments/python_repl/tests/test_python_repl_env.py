"""The `python_repl` environment: persistent state, timeouts and crashes, files, scoring, the dataset."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gym_env_python_repl import generate
from gym_env_python_repl.env import PythonReplEnv, score_answer
from gym_server.sandbox import runtime
from gym_server.sdk.registry import Registry
from gym_server.sdk.tasks import Task

TASKS = PythonReplEnv.dataset().tasks()


@pytest.fixture(autouse=True)
async def _sandbox_runtime() -> AsyncIterator[None]:
    yield
    await runtime.shutdown()


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    call = {
        "id": f"c-{name}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    return {"role": "assistant", "content": None, "tool_calls": [call]}


async def _run(env: PythonReplEnv, code: str) -> str:
    outcome = await env.step(_call("run_python", code=code))
    return str(outcome.messages[0]["content"])


def _task(family: str) -> Task:
    return next(task for task in TASKS if task.metadata["family"] == family)


def test_dataset_size_splits_and_determinism() -> None:
    sizes = PythonReplEnv.dataset().split_sizes()
    assert sizes == {"train": 128, "validation": 32}
    assert sum(sizes.values()) >= 100
    assert {task.metadata["family"] for task in TASKS} == {"csv", "puzzle"}
    assert generate.generate()[:5] == generate.generate()[:5]
    Registry([PythonReplEnv])


async def test_state_persists_and_files_are_there() -> None:
    env = PythonReplEnv(_task("csv"))
    try:
        await env.reset()
        assert "x = 1" not in await _run(
            env, "import csv\nrows = list(csv.DictReader(open('sales.csv')))\nx = len(rows)"
        )
        assert (await _run(env, "x")).strip() == str(
            len(env.task.metadata["files"]["sales.csv"].splitlines()) - 1
        )
        assert "hello" in await _run(env, "import subprocess\nsubprocess.run(['echo', 'hello'])")
        error = await _run(env, "1 / 0")
        assert "ZeroDivisionError" in error and "_repl_server" not in error
        assert "SystemExit" in await _run(env, "import sys\nsys.exit(3)")
        assert (await _run(env, "x + 1")).strip() == str(int((await _run(env, "x")).strip()) + 1)
    finally:
        await env.close()


class _QuickRepl(PythonReplEnv):
    # Short, to keep the endless cell cheap, but not tight: the interpreter restarted after the timeout and
    # after the crash starts inside the next cell's deadline, and a busy machine takes a while to start it.
    cell_timeout_s = 3.0


async def test_timeout_and_crash_restart_the_interpreter() -> None:
    env = _QuickRepl(_task("puzzle"))
    try:
        await env.reset()
        await _run(env, "kept = 5")
        assert "did not finish within 3 s" in await _run(env, "while True: pass")
        assert "NameError" in await _run(env, "kept")
        await _run(env, "kept = 6")
        assert "interpreter exited" in await _run(env, "import os\nos._exit(1)")
        assert (await _run(env, "2 + 2")).strip() == "4"
        big = await _run(env, "print('x' * 100000)")
        assert "[output truncated" in big and len(big) < 10_000
        no_net = await _run(env, "import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)")
        assert "Error" in no_net or "refused" in no_net
    finally:
        await env.close()


async def _solve(task: Task) -> float:
    env = PythonReplEnv(task)
    try:
        await env.reset()
        await _run(env, "print('thinking')")
        outcome = await env.step(_call("submit_answer", answer=str(task.answer["value"])))
        assert outcome.done
        return (await env.verify()).reward
    finally:
        await env.close()


async def test_correct_answers_score_one_and_wrong_ones_zero() -> None:
    assert await _solve(_task("csv")) == 1.0
    assert await _solve(_task("puzzle")) == 1.0
    env = PythonReplEnv(_task("puzzle"))
    await env.reset()
    await env.step({"role": "assistant", "content": "I think it is 12345678901"})
    result = await env.verify()
    assert result.reward == 0.0 and result.components["submitted"] == 0.0
    await env.close()


def test_score_answer_kinds() -> None:
    assert score_answer({"value": 3.14, "kind": "float", "tolerance": 0.01}, "3.145").score == 1.0
    assert score_answer({"value": 3.14, "kind": "float", "tolerance": 0.01}, "3.2").score == 0.0
    assert score_answer({"value": 7, "kind": "int"}, "7").score == 1.0
    assert score_answer({"value": 7, "kind": "int"}, "7.5").score == 0.0
    assert score_answer({"value": "north", "kind": "text"}, "North").score == 1.0


def test_reference_answers_recompute_from_the_files() -> None:
    import csv
    import io

    for task in [t for t in TASKS if t.metadata["family"] == "csv"][:10]:
        rows = list(csv.DictReader(io.StringIO(task.metadata["files"]["sales.csv"])))
        assert rows and set(rows[0]) == {"order_id", "region", "product", "units", "unit_price", "month"}
        if "How many orders have more than" in str(task.prompt):
            threshold = int(str(task.prompt).split("more than ")[1].split()[0])
            assert sum(int(r["units"]) > threshold for r in rows) == task.answer["value"]
