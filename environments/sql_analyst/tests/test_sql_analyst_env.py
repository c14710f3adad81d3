"""The `sql_analyst` environment: result-set comparison, sandboxed read-only queries, golden transcripts."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from gym_env_sql_analyst import generate
from gym_env_sql_analyst.env import SqlAnalystEnv
from gym_env_sql_analyst.results import ResultSet, compare, run_gold
from gym_env_sql_analyst.schemas import FAMILIES, database_script
from gym_server.sandbox import runtime
from gym_server.sdk.messages import Message
from gym_server.sdk.registry import Registry
from gym_server.sdk.tasks import Task, holdout_split, render_jsonl

FIXTURES = Path(__file__).resolve().parent.parent / "gym_env_sql_analyst" / "fixtures" / "golden.jsonl"
GOLDEN = [orjson.loads(line) for line in FIXTURES.read_bytes().splitlines() if line.strip()]
TASKS = SqlAnalystEnv.dataset().tasks()
_ids = itertools.count()


@pytest.fixture(autouse=True)
async def _sandbox_runtime() -> AsyncIterator[None]:
    yield
    await runtime.shutdown()


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    raw = orjson.dumps(arguments).decode()
    call = {"id": f"call_{next(_ids)}", "type": "function", "function": {"name": name, "arguments": raw}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


async def _replay(case: dict[str, Any]) -> Any:
    task = SqlAnalystEnv.dataset().get(case["task_id"])
    assert task is not None
    env = SqlAnalystEnv(task, case["seed"])
    try:
        await env.reset()
        for message in case["messages"]:
            if env.done:
                break
            await env.step(Message.model_validate(message).to_dict())
        return await env.verify()
    finally:
        await env.close()


def test_compare_ignores_order_and_names_unless_told_and_tolerates_rounding() -> None:
    gold = ResultSet(["city", "n"], [["Oslo", 3], ["Lisbon", 2.5], [None, 1]])
    shuffled = ResultSet(["a", "b"], [[None, 1.0], ["Lisbon", 2.50001], ["Oslo", 3]])
    assert compare(shuffled, gold, order_matters=False).score == 1.0
    assert compare(shuffled, gold, order_matters=True).score == 0.0
    assert (
        compare(
            ResultSet(["a", "b"], [["Oslo", 3], ["Lisbon", 2.6], [None, 1]]), gold, order_matters=False
        ).score
        == 0
    )
    assert compare(
        ResultSet(["a"], [["Oslo"], ["Lisbon"], [None]]), gold, order_matters=False
    ).explanation.startswith("1 col")
    assert (
        compare(
            ResultSet(["a", "b"], [["Oslo", "3"], ["Lisbon", 2.5], [None, 1]]), gold, order_matters=False
        ).score
        == 0
    )
    assert (
        compare(ResultSet(["a", "b"], [["Oslo", 3]] * 3), gold, order_matters=False).score == 0
    )  # a multiset


@pytest.mark.parametrize("case", GOLDEN, ids=[case["name"] for case in GOLDEN])
async def test_golden_fixtures_replay_to_their_reward(case: dict[str, Any]) -> None:
    result = await _replay(case)
    assert result.reward == pytest.approx(case["expected_reward"])
    assert result.components == pytest.approx(case["expected_components"])


def test_golden_fixtures_cover_full_zero_malformed_and_hedging() -> None:
    by_name = {case["name"]: case["expected_reward"] for case in GOLDEN}
    assert by_name["full_score_explore_then_answer"] == by_name["full_score_equivalent_query"] == 1.0
    assert by_name["zero_score_wrong_number"] == by_name["malformed_calls_then_prose"] == 0.0
    assert by_name["hedging_two_rows"] == by_name["write_attempt_refused"] == 0.0
    assert by_name["ordered_answer_in_the_wrong_order"] == 0.0 and by_name["full_score_ordered"] == 1.0


async def test_same_task_and_seed_replay_to_the_same_result() -> None:
    first, second = await _replay(GOLDEN[0]), await _replay(GOLDEN[0])
    assert first == second


@pytest.mark.parametrize("family", list(FAMILIES))
async def test_the_sandbox_agrees_with_the_host_on_every_gold_query(family: str) -> None:
    tasks = [task for task in TASKS if task.metadata["family"] == family]
    env = SqlAnalystEnv(tasks[0], 0)
    try:
        await env.reset()
        for task in tasks:
            result, truncated = await env._query(task.answer["sql"], 1000)
            gold = run_gold(family, task.answer["sql"])
            assert not truncated and compare(result, gold, order_matters=True).score == 1.0, task.id
    finally:
        await env.close()


async def test_queries_are_read_only_and_limited(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(SqlAnalystEnv, "query_timeout_s", 1.0)
    env = SqlAnalystEnv(TASKS[0], 0)
    try:
        await env.reset()

        async def run(query: str) -> str:
            outcome = await env.step(_call("run_sql", {"query": query}))
            return str(outcome.messages[0]["content"])

        for query in ("DELETE FROM orders", "ATTACH DATABASE 'x.db' AS x", "PRAGMA table_info(orders)",
                      "CREATE TABLE t (x)", "UPDATE products SET price = 0"):  # fmt: skip
            assert "not authorized" in await run(query)
        assert "one statement" in await run("SELECT 1; SELECT 2")
        endless = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c"
        assert "time limit" in await run(endless)
        shown = orjson.loads(await run("SELECT * FROM order_items"))
        assert len(shown["rows"]) == 50 and shown["truncated"]
        assert orjson.loads(await run("SELECT COUNT(*) FROM orders"))["rows"] == [
            [600]
        ]  # nothing was deleted
        assert "no such table" in await run("SELECT * FROM nowhere")
    finally:
        await env.close()


def test_dataset_families_splits_and_generator() -> None:
    sizes = SqlAnalystEnv.dataset().split_sizes()
    assert sizes == {"train": 62, "validation": 15}
    assert {task.metadata["family"] for task in TASKS} == set(FAMILIES)
    for name, tasks in holdout_split(generate.build_tasks(), generate.VALIDATION_EVERY).items():
        assert (SqlAnalystEnv.dataset().folder / f"{name}.jsonl").read_bytes() == render_jsonl(tasks)
    assert database_script("shop") == database_script.__wrapped__(
        "shop"
    )  # a pure function, not a cache artefact
    assert "sql_analyst" in Registry([SqlAnalystEnv])
    with pytest.raises(ValueError, match="family"):
        SqlAnalystEnv.check_task(
            Task(id="t", prompt="p", answer={"sql": "SELECT 1"}, metadata={"family": "x"})
        )
    with pytest.raises(ValueError, match="sql"):
        SqlAnalystEnv.check_task(
            Task(id="t", prompt="p", answer={"query": "SELECT 1"}, metadata={"family": "hr"})
        )
