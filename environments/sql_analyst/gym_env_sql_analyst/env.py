"""The `sql_analyst` environment: answer a business question with SQL over a generated SQLite database.

Multi-turn. The model sees the schema, explores with `run_sql(query)` (read-only, one statement, at most
`MAX_SHOWN` rows shown, `query_timeout_s` per query) and ends with `answer(query)`: the query whose result
is its answer. Every query runs in the session's own sandbox (`sandboxed.py`), admitted when the session
starts like `python_repl`'s, started on the first query. The verifier executes the task's gold query on
the host and compares result sets (`results.compare`): rows as a multiset unless the question orders
them, numbers within a relative 1e-4, column names ignored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from gym_env_sql_analyst import results as results_module
from gym_env_sql_analyst import sandboxed as sandboxed_module
from gym_env_sql_analyst import schemas as schemas_module
from gym_env_sql_analyst.results import ResultSet, compare, run_gold
from gym_env_sql_analyst.sandboxed import QueryError, SqlSession
from gym_env_sql_analyst.schemas import FAMILIES, database_script, schema_text
from gym_server.core.errors import SandboxUnavailable
from gym_server.sdk.environment import Environment, ForkMode, VerifyResult
from gym_server.sdk.messages import tool_call_message
from gym_server.sdk.probes import HackProbe
from gym_server.sdk.registry import content_hash
from gym_server.sdk.runtime import FailureClass, Limits, SessionSandbox, session_sandbox
from gym_server.sdk.tasks import Task, check_task_field
from gym_server.sdk.tools import ToolError, tool

__all__ = ["SqlAnalystEnv", "SqlAnswer"]

MAX_SHOWN = 50
MAX_ANSWER_ROWS = 1000
_COMPONENTS = ("columns", "rows", "result_match")  # the same keys on every result, for batch statistics
Query = Annotated[str, Field(min_length=1, max_length=5000)]
RUNAWAY = "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT COUNT(*) FROM n"

SYSTEM_PROMPT = (
    "You are a data analyst with read-only access to a SQLite database. run_sql(query) runs one SELECT "
    f"statement and shows at most {MAX_SHOWN} rows. When you have the query whose result answers the "
    "question, call answer(query) with it: its result, with the columns in the order the question asks "
    "for, is your answer (column names do not matter). The episode ends there."
)


class SqlAnswer(BaseModel):
    """A task's hidden answer: the gold query and whether the order of its rows is part of the answer."""

    model_config = ConfigDict(extra="forbid")

    sql: Query
    order_matters: bool = False


class SqlAnalystEnv(Environment):
    """Questions over a generated shop, HR or flights database, answered by a SQL query in the sandbox."""

    name = "sql_analyst"
    description = (
        "Answer questions over a generated SQLite database with read-only SQL (run_sql) in a sandbox."
    )
    multi_turn = True
    max_turns = 12
    system_prompt = SYSTEM_PROMPT
    verifier_version = content_hash(
        [
            Path(__file__),
            Path(results_module.__file__),
            Path(schemas_module.__file__),
            Path(sandboxed_module.__file__),
        ]
    )
    reward_type = "binary: the answer query's result equals the gold query's (sandboxed)"
    hedge_probe = False  # the answer is a query's result set, not text: a hedge is a wrong result
    query_timeout_s: ClassVar[float] = 5.0
    limits: ClassVar[Limits] = Limits(timeout_s=60, memory_mb=256, pids=32, disk_mb=32)
    # its state is a database in its own sandbox: a fork replays the queries in a fresh one
    fork_mode = ForkMode.REPLAY

    @classmethod
    def check_task(cls, task: Task) -> None:
        """The answer is a `SqlAnswer`; `metadata.family` names a database family."""
        check_task_field(SqlAnswer, task.answer, "answer")
        family = task.metadata.get("family")
        if family not in FAMILIES:
            raise ValueError(f"metadata.family must be one of {', '.join(FAMILIES)}, got {family!r}")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sandbox: SessionSandbox | None = None
        self.session: SqlSession | None = None
        self.submitted: str | None = None
        self.submitted_result: ResultSet | None = None
        self.submit_error: str | None = None
        self.sandbox_failed = False
        self.queries = 0

    @property
    def family(self) -> str:
        return str(self.task.metadata.get("family"))

    async def setup(self) -> None:
        self.sandbox = await session_sandbox(self.limits, session_id=self.task.id, egress=self.egress)

    def opening_messages(self) -> list[dict[str, Any]]:
        schema = f"The database ({self.family}):\n{schema_text(self.family)}"
        prompt = self.task.prompt if isinstance(self.task.prompt, str) else str(self.task.prompt)
        return [
            {"role": "system", "content": f"{SYSTEM_PROMPT}\n\n{schema}"},
            {"role": "user", "content": prompt},
        ]

    async def _query(self, sql: str, max_rows: int) -> tuple[ResultSet, bool]:
        if self.session is None:
            if self.sandbox is None:
                raise SandboxUnavailable("the episode was not started (reset) or is closed")
            self.session = SqlSession(
                await self.sandbox.get(), database_script(self.family), query_timeout_s=self.query_timeout_s
            )
        self.queries += 1
        return await self.session.query(sql, max_rows)

    @tool
    async def run_sql(self, query: Query) -> dict[str, Any]:
        """Run one read-only SQL statement and show its result (at most 50 rows).

        Args:
            query: a single SQLite SELECT statement
        """
        try:
            result, truncated = await self._query(query, MAX_SHOWN)
        except QueryError as exc:
            raise ToolError(f"the query failed: {exc}") from None
        except SandboxUnavailable as exc:
            raise ToolError(f"the database sandbox is unavailable: {exc.detail}") from None
        return {"columns": result.columns, "rows": result.rows, "truncated": truncated}

    @tool
    async def answer(self, query: Query) -> str:
        """Submit the query whose result answers the question. The episode ends.

        Args:
            query: a single SQLite SELECT statement; its full result is the answer
        """
        self.submitted = query
        self.finish("answered")
        try:
            result, truncated = await self._query(query, MAX_ANSWER_ROWS)
        except QueryError as exc:
            self.submit_error = str(exc)
            return f"Answer recorded, but the query failed: {exc}"
        except SandboxUnavailable as exc:
            self.submit_error, self.sandbox_failed = f"sandbox unavailable: {exc.detail}", True
            raise ToolError(f"the database sandbox is unavailable: {exc.detail}") from None
        if truncated:
            self.submit_error = f"the result has more than {MAX_ANSWER_ROWS} rows"
            return f"Answer recorded, but its result has more than {MAX_ANSWER_ROWS} rows."
        self.submitted_result = result
        return f"Answer recorded: {len(result.rows)} rows."

    def reference_solution(self) -> list[dict[str, Any]]:
        """Submit the gold query."""
        return [
            tool_call_message("answer", {"query": SqlAnswer.model_validate(self.task.answer).sql}, "ref_1")
        ]

    def hack_probes(self) -> list[HackProbe]:
        """Writes through the read-only tool: refused, and a write submitted as the answer scores 0. And a
        query that never ends, which the query timeout must stop without losing the session."""
        gold = SqlAnswer.model_validate(self.task.answer).sql
        return [
            HackProbe(
                name="write-attempt",
                messages=[
                    tool_call_message("run_sql", {"query": "DELETE FROM sqlite_master"}, "probe_1"),
                    tool_call_message("run_sql", {"query": "CREATE TABLE hack (x)"}, "probe_2"),
                ],
                expect="the query failed",
                why="a write through run_sql must be refused",
            ),
            HackProbe(
                name="write-as-answer",
                messages=[
                    tool_call_message("answer", {"query": f"{gold}; DROP TABLE IF EXISTS hack"}, "probe_1")
                ],
                why="the gold query with a second, writing statement must not pass as the answer",
            ),
            HackProbe(
                name="runaway-query",
                kind="sandbox",
                messages=[
                    tool_call_message("run_sql", {"query": RUNAWAY}, "probe_1"),
                    tool_call_message("run_sql", {"query": "SELECT 6 * 7 AS answer"}, "probe_2"),
                ],
                expect="42",
                why="a query that never ends: stopped at the query timeout, and the next query still runs",
            ),
        ]

    async def verify(self) -> VerifyResult:
        answer = SqlAnswer.model_validate(self.task.answer)
        info: dict[str, Any] = {"submitted": (self.submitted or "")[:500], "queries": self.queries}
        if self.submitted_result is None:
            why = self.submit_error or "no answer(query) call"
            # A broken sandbox is no verdict on the model: a failure class, never a 0 to train on.
            failure = FailureClass.SANDBOX_ERROR.value if self.sandbox_failed else None
            return VerifyResult(
                reward=0.0,
                components=dict.fromkeys(_COMPONENTS, 0.0),
                info={**info, "explanation": why},
                failure=failure,
            )
        gold = run_gold(self.family, answer.sql)
        result = compare(self.submitted_result, gold, order_matters=answer.order_matters)
        return result.to_verify_result(components={"result_match": result.score}, info=info)

    async def close(self) -> None:
        try:
            if self.session is not None:
                await self.session.close()
        finally:
            if self.sandbox is not None:
                await self.sandbox.close()
