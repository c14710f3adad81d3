"""CPU of an acknowledged create's and close's one-row commit on a SQLite file, through the store's own
write path, on the schema as migrated and on the same table stripped of its indexes and triggers.

    python benchmarks/sqlite_commit.py [--episodes 300] [--rounds 6] [--stored 5000]

Why: an episode's two acknowledgements are each a commit of one row when nothing groups them (one client),
and what that commit costs is mostly the schema's, not the data's: the secondary indexes, the totals
triggers, the statement journal they need. `sessions_against.py` shows what a change does to the whole
server; this shows where a commit's CPU goes, with no server and no HTTP, so a change to the schema or to
the write connections can be measured in seconds. Each variant is a fresh database holding `--stored`
finished rows; a round commits `--episodes` creates and closes on each variant in turn, with the loop's
connection (`write_link.loop_engine`) and `repository.upsert_trajectories_sqlite`, as the server's event
loop does, and checkpoints every 64 commits as the writer thread does. Thread CPU time per commit; a
variant reports the lowest of its rounds' medians (other work on a shared machine only adds time).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _sessions_report import console
from _sessions_system import machine_description
from rich.table import Table
from sqlalchemy import Connection, text

from gym_server.store import repository
from gym_server.store.migrate import upgrade_database
from gym_server.store.records import TrajectoryRecord, TrajectoryStatus, utcnow
from gym_server.store.write_link import loop_engine

_CHECKPOINT_EVERY = 64
_PROMPT = [{"role": "user", "content": "What is 12 + 30? Answer with the number."}]


def _strip(connection: Connection) -> None:
    """Drop every secondary index and trigger of `trajectories`: the floor a row's commit costs."""
    for kind in ("index", "trigger"):
        names = connection.execute(
            text(
                "SELECT name FROM sqlite_master WHERE type = :kind"
                " AND tbl_name = 'trajectories' AND sql IS NOT NULL"
            ),
            {"kind": kind},
        ).scalars()
        for name in list(names):
            connection.exec_driver_sql(f"DROP {kind.upper()} {name}")


VARIANTS: dict[str, Callable[[Connection], None] | None] = {
    "the schema as migrated": None,
    "no secondary index, no trigger": _strip,
}


def _record(number: int, *, closed: bool) -> TrajectoryRecord:
    created = TrajectoryRecord(
        id=f"s{number:09d}",
        run="bench",
        env="counter",
        env_version="ab12cd34",
        task_id=f"t{number % 500}",
        messages=_PROMPT,
        policy={"model": "m1"},
        server_name="bench",
        created_at=utcnow(),
    )
    if not closed:
        return created
    return created.model_copy(
        update={
            "status": TrajectoryStatus.COMPLETED,
            "reward": 1.0,
            "num_turns": 8,
            "messages": _PROMPT + [{"role": "assistant", "content": "42"}] * 8,
            "timings": {"step_ms": [0.1] * 8},
            "finished_at": utcnow(),
        }
    )


class Variant:
    """One database and the loop's connection to it."""

    def __init__(self, directory: Path, name: str, prepare: Callable[[Connection], None] | None, stored: int):
        url = f"sqlite:///{directory / (str(abs(hash(name))) + '.db')}"
        upgrade_database(url)
        engine = loop_engine(url)
        if engine is None:
            raise RuntimeError(f"{url} is not a SQLite file")
        self.connection = engine.connect()
        if prepare is not None:
            prepare(self.connection)
        self._write([_record(-number - 1, closed=True) for number in range(stored)])
        self.connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        self.commits = 0
        self.creates: list[float] = []
        self.closes: list[float] = []

    def _write(self, records: list[TrajectoryRecord]) -> None:
        repository.upsert_trajectories_sqlite(self.connection, records)
        self.connection.connection.driver_connection.commit()  # type: ignore[union-attr]

    def _timed(self, record: TrajectoryRecord) -> float:
        started = time.thread_time_ns()
        self._write([record])
        spent = (time.thread_time_ns() - started) / 1e3
        self.commits += 1
        if self.commits % _CHECKPOINT_EVERY == 0:
            self.connection.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")
        return spent

    def round(self, first: int, episodes: int) -> None:
        creates, closes = [], []
        for number in range(first, first + episodes):
            created = _record(number, closed=False)
            creates.append(self._timed(created))
            closed = _record(number, closed=True).model_copy(update={"created_at": created.created_at})
            closes.append(self._timed(closed))
        self.creates.append(statistics.median(creates))
        self.closes.append(statistics.median(closes))


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--episodes", type=int, default=300, help="creates and closes per variant and round")
    parser.add_argument("--rounds", type=int, default=6, help="rounds, the variants taking turns")
    parser.add_argument("--stored", type=int, default=5000, help="finished rows in each database first")
    args = parser.parse_args(argv)
    machine = machine_description()
    console.print(", ".join(f"{key} {value}" for key, value in machine.items()))
    with tempfile.TemporaryDirectory(prefix="gym-commit-") as directory:
        variants = {
            name: Variant(Path(directory), name, prepare, args.stored) for name, prepare in VARIANTS.items()
        }
        for round_number in range(args.rounds):
            for variant in variants.values():
                variant.round(round_number * args.episodes, args.episodes)
        table = Table(title=f"CPU µs per one-row commit (lowest of {args.rounds} rounds' medians)")
        for column in ("schema", "create", "close", "episode (create + close)"):
            table.add_column(column, justify="right")
        for name, variant in variants.items():
            create, close = min(variant.creates), min(variant.closes)
            table.add_row(name, f"{create:,.0f}", f"{close:,.0f}", f"{create + close:,.0f}")
            variant.connection.close()
    console.print(table)
    console.print(f"load average at the end: {' / '.join(Path('/proc/loadavg').read_text().split()[:3])}")


if __name__ == "__main__":
    main(sys.argv[1:])
