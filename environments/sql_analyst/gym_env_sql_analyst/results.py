"""Result sets: run the gold query on the host, and compare the model's result with it.

The gold query is trusted (it comes from the dataset), so it runs here, in process, on an in-memory copy
of the family's database; the model's queries never do: they run in the session's sandbox (`env.py`).
`compare` is the verifier: the same number of columns and rows, and the same rows as a multiset (or as
a sequence when the question orders them), numbers equal within `rel_tol` (integers and reals compare
as numbers, so `COUNT(*)` may meet `SUM(1.0)`), text exactly, NULL only with NULL. Column names never
matter: `SELECT COUNT(*)` and `SELECT COUNT(*) AS n` answer alike.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gym_env_sql_analyst.schemas import database_script
from gym_verifiers.result import Failure, VerifierResult

__all__ = ["REL_TOL", "ResultSet", "compare", "run_gold"]

REL_TOL = 1e-4


@dataclass(frozen=True, slots=True)
class ResultSet:
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)


def run_gold(family: str, sql: str) -> ResultSet:
    """The gold query's full result on a fresh in-memory copy of the family's database.

    Raises:
        sqlite3.Error: the gold query is broken (a dataset bug: the generator's test runs every one).
    """
    with sqlite3.connect(":memory:") as connection:
        connection.executescript(database_script(family))
        cursor = connection.execute(sql)
        columns = [column[0] for column in cursor.description or []]
        rows = [list(row) for row in cursor.fetchall()]
    connection.close()
    return ResultSet(columns, rows)


def _key(row: Sequence[Any]) -> tuple[tuple[int, Any], ...]:
    """A sort key that orders NULLs, numbers and text apart (numbers coarsely, so near-equal ones meet)."""
    key: list[tuple[int, Any]] = []
    for value in row:
        if value is None:
            key.append((0, 0))
        elif isinstance(value, (int, float)):
            key.append((1, round(float(value), 3) if math.isfinite(value) else str(value)))
        else:
            key.append((2, str(value)))
    return tuple(key)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(float(a), float(b), rel_tol=REL_TOL, abs_tol=1e-9)
    return type(a) is type(b) and a == b


def compare(submitted: ResultSet, gold: ResultSet, *, order_matters: bool) -> VerifierResult:
    """1.0 when the submitted result equals the gold one (see the module docstring), else 0.0."""
    width = len(gold.columns)
    components = {
        "columns": float(len(submitted.columns) == width),
        "rows": float(len(submitted.rows) == len(gold.rows)),
    }
    if not gold.columns:
        return VerifierResult.zero("the gold query returns no columns", failure=Failure.INVALID_REFERENCE)
    if len(submitted.columns) != width:
        return VerifierResult.zero(f"{len(submitted.columns)} columns, expected {width}", components)
    if len(submitted.rows) != len(gold.rows):
        return VerifierResult.zero(f"{len(submitted.rows)} rows, expected {len(gold.rows)}", components)
    mine, theirs = submitted.rows, gold.rows
    if not order_matters:
        mine, theirs = sorted(mine, key=_key), sorted(theirs, key=_key)
    for index, (row, expected) in enumerate(zip(mine, theirs, strict=True)):
        if not all(_same(a, b) for a, b in zip(row, expected, strict=True)):
            where = f"row {index + 1}" if order_matters else "a row"
            return VerifierResult.zero(f"{where} differs: {_short(row)} vs {_short(expected)}", components)
    return VerifierResult(
        1.0, components, f"{len(gold.rows)} rows match" + (" in order" if order_matters else "")
    )


def _short(row: Sequence[Any]) -> str:
    text = repr(list(row))
    return text if len(text) <= 80 else text[:77] + "..."
