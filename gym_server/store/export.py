"""Exporting stored trajectories to files a training or analysis job reads: JSONL, CSV and Parquet.

Rows stream from the database in pages (`yield_per`, a server-side cursor on Postgres), so an export of
millions of episodes holds one page in memory, never the table. Order is the API's: newest first.

- **JSONL**: one `TrajectoryRecord` per line (`model_dump(mode="json")`, written by `gym_server.core.jsontext`
  so any integer stays exact): timestamps in ISO 8601 with their UTC offset, NUL bytes escaped as
  `\\u0000`. `TrajectoryRecord.model_validate_json` reads a line back.
- **Parquet**: one row per trajectory. Scalar fields are typed columns (strings, int64, float64, UTC
  timestamps); the nested fields (`NESTED_FIELDS`: messages, tools, components, ...) are JSON strings,
  because their shape differs per environment and Arrow would otherwise infer a union schema per file.
  `json.loads` on each of them gives back the record's value. pyarrow is the optional extra `[parquet]`.
- **CSV**: the same flat row as Parquet, one line per trajectory under a header of the record's field
  names: scalars as text (timestamps in ISO 8601, an absent value as an empty cell), nested fields as
  JSON strings (quoted by the CSV writer), so a spreadsheet or `pandas.read_csv` reads it as is.

`format_for(path)` picks the format from the file's suffix and refuses one it does not know, so a
`runs.csv` never receives JSONL.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy.orm import Session

from gym_server.core import jsontext
from gym_server.core.extras import needs_extras
from gym_server.store.migrate import json_dumps, make_engine
from gym_server.store.records import TrajectoryRecord, TrajectoryStatus
from gym_server.store.repository import TrajectoryFilter, count_matching, row_to_record, select_trajectories

if TYPE_CHECKING:
    import pyarrow

__all__ = [
    "NESTED_FIELDS",
    "SUFFIXES",
    "ExportFormat",
    "UnknownExportFormat",
    "count_matching_records",
    "export_trajectories",
    "format_for",
    "parquet_schema",
    "require_pyarrow",
    "stream_records",
]

ExportFormat = Literal["jsonl", "csv", "parquet"]
SUFFIXES: dict[str, ExportFormat] = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
}
NESTED_FIELDS = ("messages", "tools", "components", "verify_info", "policy", "turns", "timings", "metadata")
PAGE_SIZE = 500
Progress = Callable[[int], None]  # called with the number of rows written so far


class UnknownExportFormat(ValueError):
    """An export format was asked for by name or suffix that no writer handles."""


def format_for(path: str | Path) -> ExportFormat:
    """The export format a file's suffix names (case-insensitive).

    Raises:
        UnknownExportFormat: the suffix is none of `SUFFIXES`.
    """
    suffix = Path(path).suffix.lower()
    if suffix not in SUFFIXES:
        known = ", ".join(SUFFIXES)
        raise UnknownExportFormat(
            f"cannot tell an export format from {Path(path).name!r}: use a suffix {known} or give --format"
        )
    return SUFFIXES[suffix]


def require_pyarrow() -> Any:
    """The `pyarrow` module with `pyarrow.parquet` loaded; `MissingExtra` names the `[parquet]` extra."""
    with needs_extras("Parquet export"):
        import pyarrow
        import pyarrow.parquet
    return pyarrow


def parquet_schema() -> pyarrow.Schema:
    """The Arrow schema of an exported Parquet file: typed scalars, nested fields as JSON strings."""
    pa = require_pyarrow()
    timestamp = pa.timestamp("us", tz="UTC")
    types = {"seed": pa.int64(), "reward": pa.float64(), "num_turns": pa.int64()}
    types |= {"created_at": timestamp, "finished_at": timestamp}
    fields = [
        pa.field(name, types.get(name, pa.string()), nullable=name != "id")
        for name in TrajectoryRecord.model_fields
    ]
    return pa.schema(fields)


@contextmanager
def stream_records(
    url: str, where: TrajectoryFilter, limit: int | None = None
) -> Iterator[Iterator[TrajectoryRecord]]:
    """The records `where` keeps, newest first, read page by page on an engine of its own."""
    engine = make_engine(url)
    try:
        with Session(engine) as session:
            statement = select_trajectories(where).limit(limit).execution_options(yield_per=PAGE_SIZE)
            yield (row_to_record(row) for row in session.execute(statement))
    finally:
        engine.dispose()


def count_matching_records(url: str, where: TrajectoryFilter) -> int:
    """How many stored records `where` keeps, on an engine of its own (what an export left out)."""
    engine = make_engine(url)
    try:
        with Session(engine) as session:
            return count_matching(session, where)
    finally:
        engine.dispose()


def _write_jsonl(records: Iterator[TrajectoryRecord], out_path: Path, progress: Progress) -> int:
    count = 0
    with out_path.open("wb") as out:
        for record in records:
            out.write(jsontext.dumps(record.model_dump(mode="json")) + b"\n")
            count += 1
            if count % PAGE_SIZE == 0:
                progress(count)
    progress(count)
    return count


def _flat_row(record: TrajectoryRecord, mode: Literal["python", "json"] = "python") -> dict[str, Any]:
    """One trajectory as typed scalars (`mode="json"`: as JSON scalars) and nested fields as JSON text."""
    row = record.model_dump(mode=mode)
    for name in NESTED_FIELDS:
        row[name] = json_dumps(row[name])
    row["status"] = record.status.value
    return row


def _write_parquet(
    records: Iterator[TrajectoryRecord], out_path: Path, progress: Callable[[int], None]
) -> int:
    pa = require_pyarrow()
    schema = parquet_schema()
    count = 0
    with pa.parquet.ParquetWriter(out_path, schema, compression="zstd") as writer:
        page: list[dict[str, Any]] = []
        for record in records:
            page.append(_flat_row(record))
            if len(page) == PAGE_SIZE:
                writer.write_table(pa.Table.from_pylist(page, schema=schema))
                count += len(page)
                progress(count)
                page = []
        if page or count == 0:  # an empty export is still a valid file with the schema
            writer.write_table(pa.Table.from_pylist(page, schema=schema))
            count += len(page)
            progress(count)
    return count


def _write_csv(records: Iterator[TrajectoryRecord], out_path: Path, progress: Progress) -> int:
    count = 0
    with out_path.open("w", encoding="utf-8", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(TrajectoryRecord.model_fields))
        writer.writeheader()
        for record in records:
            writer.writerow(_flat_row(record, "json"))
            count += 1
            if count % PAGE_SIZE == 0:
                progress(count)
    progress(count)
    return count


def export_trajectories(
    url: str,
    out_path: str | Path,
    fmt: ExportFormat,
    *,
    run: str | None = None,
    env: str | None = None,
    task_id: str | None = None,
    status: TrajectoryStatus | None = None,
    tenant: str | None = None,
    evaluation: bool | None = None,
    limit: int | None = None,
    progress: Progress | None = None,
) -> int:
    """Write the stored trajectories matching the filters to `out_path`; returns how many.

    Args:
        url: the store's database URL.
        out_path: the file to create (overwritten); its folder is created.
        fmt: `jsonl`, `csv` or `parquet` (see the module docstring for the layouts).
        run, env, task_id, status, tenant: keep only trajectories with these values; None keeps all.
        evaluation: False leaves evaluation episodes out, True keeps only them (`TrajectoryFilter`).
        limit: export at most this many (the newest).
        progress: called with the running count as rows are written.

    Raises:
        UnknownExportFormat: `fmt` is not one of the formats above.
        MissingExtra: Parquet was asked for and pyarrow is not installed.
    """
    writers = {"jsonl": _write_jsonl, "csv": _write_csv, "parquet": _write_parquet}
    if fmt not in writers:
        raise UnknownExportFormat(f"unknown export format {fmt!r}; use one of {sorted(writers)}")
    if fmt == "parquet":
        require_pyarrow()  # fail before touching the database or the output file
    path = Path(out_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    where = TrajectoryFilter(
        run=run, env=env, task_id=task_id, status=status, tenant=tenant, evaluation=evaluation
    )
    with stream_records(url, where, limit) as records:
        return writers[fmt](records, path, progress or (lambda _count: None))
