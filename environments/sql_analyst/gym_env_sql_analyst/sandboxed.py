"""The model's queries, run read-only inside the session's sandbox with a row and a time limit.

The sandbox runs the same persistent interpreter as `python_repl` (`PythonSession`); this module only
ever sends it its own two cells: `BOOTSTRAP`, which builds the database in memory from `db.sql` and
installs an authorizer that allows reading and nothing else (no writes, no ATTACH, no PRAGMA), and a
call of `_gym_sql(query, max_rows, timeout_s)` with the model's SQL as a Python string literal
(`repr`), so the SQL is data, never code. SQLite's progress handler stops a query at its deadline;
`cursor.execute` runs one statement only. If the interpreter restarts (a cell timed out, memory ran
out) the next query bootstraps it again.
"""

from __future__ import annotations

import json
from typing import Any

from gym_env_python_repl.repl import PythonSession
from gym_env_sql_analyst.results import ResultSet
from gym_server.sdk.runtime import Sandbox

__all__ = ["BOOTSTRAP", "QueryError", "SqlSession"]

BOOTSTRAP = """
import json as _gym_json, sqlite3 as _gym_sqlite3, time as _gym_time
_gym_db = _gym_sqlite3.connect(":memory:")
with open("db.sql", encoding="utf-8") as _gym_file:
    _gym_db.executescript(_gym_file.read())
_GYM_ALLOWED = {_gym_sqlite3.SQLITE_SELECT, _gym_sqlite3.SQLITE_READ, _gym_sqlite3.SQLITE_FUNCTION,
                _gym_sqlite3.SQLITE_RECURSIVE}
_gym_db.set_authorizer(lambda action, *rest: 0 if action in _GYM_ALLOWED else 1)

def _gym_sql(query, max_rows, timeout_s):
    deadline = _gym_time.monotonic() + timeout_s
    _gym_db.set_progress_handler(lambda: int(_gym_time.monotonic() > deadline), 1000)
    try:
        cursor = _gym_db.execute(query)
        columns = [column[0] for column in cursor.description or []]
        rows = cursor.fetchmany(max_rows + 1)
        reply = {"columns": columns, "rows": [list(row) for row in rows[:max_rows]],
                 "truncated": len(rows) > max_rows}
    except (_gym_sqlite3.Error, ValueError, OverflowError, MemoryError) as exc:
        reply = {"error": ("time limit reached" if "interrupted" in str(exc) else str(exc))[:500]}
    finally:
        _gym_db.set_progress_handler(None, 0)
    print(_gym_json.dumps(reply, default=repr))
"""


class QueryError(Exception):
    """The query failed (SQLite's message, a time limit, an interpreter restart); the model reads it."""


class SqlSession:
    """One database in one sandbox; queries run one at a time."""

    def __init__(self, sandbox: Sandbox, script: str, *, query_timeout_s: float) -> None:
        self.python = PythonSession(sandbox, max_output=1 << 20)
        self.sandbox = sandbox
        self.script = script
        self.query_timeout_s = query_timeout_s
        self._ready_at: int | None = None  # the interpreter restart count the database was built for

    def __repr__(self) -> str:
        return f"SqlSession(sandbox={self.sandbox.id!r}, ready={self._ready_at is not None})"

    async def _ensure(self) -> None:
        if self._ready_at == self.python.restarts:
            return
        if self._ready_at is None:
            await self.sandbox.put_file("db.sql", self.script)
        output = await self.python.run(BOOTSTRAP, self.query_timeout_s + 20)
        if output != "(no output)":
            raise QueryError(f"the database could not be loaded: {output[:300]}")
        self._ready_at = self.python.restarts

    async def query(self, sql: str, max_rows: int) -> tuple[ResultSet, bool]:
        """Run one statement; returns its result (at most `max_rows` rows) and whether rows were cut.

        Raises:
            QueryError: SQLite refused or stopped the query, or the interpreter had to restart.
            SandboxUnavailable: the sandbox itself is broken.
        """
        await self._ensure()
        cell = f"_gym_sql({sql!r}, {int(max_rows)}, {self.query_timeout_s!r})"
        output = await self.python.run(cell, self.query_timeout_s + 5)
        try:
            reply: dict[str, Any] = json.loads(output)
        except ValueError:
            raise QueryError(output.removeprefix("Error: ")[:500]) from None
        if "error" in reply:
            raise QueryError(str(reply["error"]))
        return ResultSet(list(reply["columns"]), list(reply["rows"])), bool(reply["truncated"])

    async def close(self) -> None:
        await self.python.close()
