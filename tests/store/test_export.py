"""Exports read back into the records they came from: JSONL and Parquet, filtered, limited, paged."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy.orm import Session

from gym_server.core.extras import MissingExtra
from gym_server.store import export as export_module
from gym_server.store.export import (
    NESTED_FIELDS,
    UnknownExportFormat,
    export_trajectories,
    format_for,
    parquet_schema,
)
from gym_server.store.migrate import make_engine
from gym_server.store.records import TrajectoryRecord, TrajectoryStatus
from gym_server.store.repository import upsert_trajectories

RecordFactory = Callable[..., TrajectoryRecord]


def store_records(url: str, records: list[TrajectoryRecord]) -> None:
    engine = make_engine(url)
    try:
        with Session(engine) as session, session.begin():
            upsert_trajectories(session, records)
    finally:
        engine.dispose()


def read_jsonl(path: Path) -> list[TrajectoryRecord]:
    return [TrajectoryRecord.model_validate_json(line) for line in path.read_bytes().splitlines()]


def read_parquet(path: Path) -> list[TrajectoryRecord]:
    table = pq.read_table(path)
    assert table.schema == parquet_schema()
    rows = table.to_pylist()
    for row in rows:
        for name in NESTED_FIELDS:
            row[name] = json.loads(row[name])
    return [TrajectoryRecord.model_validate(row) for row in rows]


READERS = {"jsonl": read_jsonl, "parquet": read_parquet}


@pytest.fixture
def stored(
    store_url: str, full_record: TrajectoryRecord, make_record: RecordFactory
) -> list[TrajectoryRecord]:
    """The full record plus 11 more over two runs, stored; returned newest first."""
    records = [full_record] + [make_record(run="r1" if n % 2 else "r2") for n in range(11)]
    store_records(store_url, records)
    return sorted(records, key=lambda record: record.created_at, reverse=True)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_export_round_trips_every_record(
    store_url: str,
    stored: list[TrajectoryRecord],
    tmp_path: Path,
    fmt: export_module.ExportFormat,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(export_module, "PAGE_SIZE", 5)  # several pages, the last one short
    seen: list[int] = []
    out = tmp_path / "out" / f"all.{fmt}"
    assert export_trajectories(store_url, out, fmt, progress=seen.append) == len(stored)
    assert READERS[fmt](out) == stored
    assert seen[-1] == len(stored)
    assert seen == sorted(seen)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_export_filters_and_limit(
    store_url: str, stored: list[TrajectoryRecord], tmp_path: Path, fmt: export_module.ExportFormat
) -> None:
    out = tmp_path / f"r1.{fmt}"
    r1 = [record for record in stored if record.run == "r1"]
    assert export_trajectories(store_url, out, fmt, run="r1", limit=3) == 3
    assert READERS[fmt](out) == r1[:3]
    live = TrajectoryStatus.LIVE
    assert export_trajectories(store_url, out, fmt, env="math", task_id="task-1", status=live) == 4
    assert {record.task_id for record in READERS[fmt](out)} == {"task-1"}
    assert export_trajectories(store_url, out, fmt, tenant="default") == len(stored)  # rows made without keys
    assert export_trajectories(store_url, out, fmt, tenant="someone-else") == 0


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_empty_export_is_a_valid_file(
    store_url: str, tmp_path: Path, fmt: export_module.ExportFormat
) -> None:
    out = tmp_path / f"empty.{fmt}"
    assert export_trajectories(store_url, out, fmt) == 0
    assert READERS[fmt](out) == []


def test_parquet_types(store_url: str, stored: list[TrajectoryRecord], tmp_path: Path) -> None:
    out = tmp_path / "typed.parquet"
    export_trajectories(store_url, out, "parquet", limit=1)
    schema = pq.read_schema(out)
    assert schema.field("created_at").type == pa.timestamp("us", tz="UTC")
    assert (schema.field("seed").type, schema.field("reward").type) == (pa.int64(), pa.float64())
    assert schema.field("messages").type == pa.string()


def test_parquet_without_pyarrow_says_what_to_install(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    out = tmp_path / "x.parquet"
    with pytest.raises(MissingExtra, match=r"pip install 'gym-server\[parquet\]'"):
        export_trajectories(store_url, out, "parquet")
    assert not out.exists()


def test_unknown_format(store_url: str, tmp_path: Path) -> None:
    with pytest.raises(UnknownExportFormat, match="unknown export format 'xml'"):
        export_trajectories(store_url, tmp_path / "x.xml", "xml")  # type: ignore[arg-type]
    assert not (tmp_path / "x.xml").exists()


def test_csv_is_flat_with_nested_fields_as_json(
    store_url: str, tmp_path: Path, full_record: TrajectoryRecord
) -> None:
    """One header of the record's fields; nested values read back with json.loads, scalars as text."""
    engine = make_engine(store_url)
    with Session(engine) as session, session.begin():
        upsert_trajectories(session, [full_record])
    engine.dispose()
    out = tmp_path / "runs.csv"
    assert export_trajectories(store_url, out, format_for(out)) == 1
    with out.open(newline="", encoding="utf-8") as file:
        reader = csv.DictReader(file)
        assert reader.fieldnames == list(TrajectoryRecord.model_fields)
        (row,) = list(reader)
    expected = full_record.model_dump(mode="json")
    for name in NESTED_FIELDS:
        assert json.loads(row[name]) == expected[name], name
    assert (row["id"], row["run"], row["seed"]) == (full_record.id, full_record.run, str(full_record.seed))
    assert datetime.fromisoformat(row["created_at"]) == full_record.created_at
    assert row["status"] == full_record.status.value


@pytest.mark.parametrize(
    ("name", "fmt"), [("a.jsonl", "jsonl"), ("a.NDJSON", "jsonl"), ("a.csv", "csv"), ("a.parquet", "parquet")]
)
def test_format_follows_the_suffix(name: str, fmt: str) -> None:
    assert format_for(name) == fmt


@pytest.mark.parametrize("name", ["runs.txt", "runs", "runs.json", "runs.csv.gz"])
def test_an_unknown_suffix_is_refused(name: str) -> None:
    with pytest.raises(UnknownExportFormat, match=r"use a suffix \.jsonl, \.ndjson, \.csv, \.parquet"):
        format_for(name)
