"""The session benchmark's side-by-side phase: the gym, the bare Starlette floor and OpenEnv's own server.

Issue 13's targets are ratios: the gym's steps/s over the floor's at 16 and 256 clients, and its step p50
at 256 clients against OpenEnv's WebSocket server. A ratio is only worth something when both sides ran
under the same conditions, so this phase runs all three in one process of `sessions.py`, each pinned to
the server core with the load generator on the other, interleaved: for every round and every client
level, the three paths one after another, so drift over the run (other jobs on a shared machine) touches
them alike. The load average is read at the end of every measured level.

The paths and the driver are `protocols.py`'s (the same episode of the counter environment: open, K
steps with the last one submitting, close; only steps timed):
- the gym under test, through its native API (`_protocol_native.py`);
- the floor, `peers/starlette_echo.py` from this interpreter, played by the same native client;
- OpenEnv's own server (`peers/openenv_counter.py`, from the openenv peer's venv), skipped with a note
  when that venv is not built.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass
from pathlib import Path

from _protocol_native import PATHS as NATIVE
from _protocol_native import NativeClient
from _protocol_openenv import PATHS as OPENENV
from _protocol_path import PeerServer, ProtocolPath
from _sessions_system import ManagedProcess
from protocols import Level, peer_level, run_level
from rich.console import Console
from rich.table import Table

__all__ = ["PeerRow", "print_side_by_side", "side_by_side"]

_PEERS_DIR = Path(__file__).resolve().parent / "peers"


def _floor_argv(port: int) -> list[str]:
    return [
        sys.executable,
        *("-m", "uvicorn", "--app-dir", str(_PEERS_DIR), "starlette_echo:app", "--port", str(port)),
        *("--loop", "uvloop", "--http", "httptools", "--log-level", "warning"),
    ]


GYM = NATIVE[0]
FLOOR = ProtocolPath(
    "bare Starlette echo (floor)",
    "the native client against peers/starlette_echo.py",
    NativeClient,
    PeerServer(_floor_argv, "/health"),
)
OPENENV_OWN = next(path for path in OPENENV if path.server is not None)


@dataclass(slots=True)
class PeerRow:
    round: int
    level: Level
    load: str  # the 1-minute load average when the level ended


def _load1() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


async def side_by_side(
    args: argparse.Namespace, server: ManagedProcess, port: int, workdir: Path, console: Console
) -> list[PeerRow]:
    """`args.peer_rounds` rounds of every client level of the three paths, interleaved."""
    paths = [GYM, FLOOR]
    assert OPENENV_OWN.server is not None
    if OPENENV_OWN.server.missing:
        console.print(f"[yellow]{OPENENV_OWN.name}: skipped, {OPENENV_OWN.server.missing}[/]")
    else:
        paths.append(OPENENV_OWN)
    rows: list[PeerRow] = []
    for round_ in range(1, args.peer_rounds + 1):
        for clients in args.clients:
            for path in paths:
                console.print(f"round {round_}, {path.name}, {clients} clients ...")
                if path.server is None:
                    level = await run_level(path, port, server.pid, clients, args)
                    if not server.alive():
                        raise RuntimeError(f"the server died during {path.name}:\n{server.log_tail()}")
                    await asyncio.sleep(0.3)  # the store's writer flushes this level's closes
                else:
                    level = await peer_level(path, path.server, clients, args, workdir)
                rows.append(PeerRow(round_, level, _load1()))
    return rows


def print_side_by_side(rows: list[PeerRow], console: Console) -> None:
    table = Table(
        title="side by side, interleaved (open, K steps, close; steps timed); 'of floor' is steps/s over "
        "the floor's in the same round"
    )
    for column in (
        "round",
        "clients",
        "server",
        "steps/s",
        "of floor",
        "server CPU per step",
        "steps/s per server core",
        "of floor",
        "step p50",
        "step p99",
        "server CPU",
        "loadgen CPU",
        "load 1 min",
        "errors",
    ):
        table.add_column(column, justify="left" if column in ("server", "errors") else "right")
    floors = {(r.round, r.level.clients): r.level for r in rows if r.level.path == FLOOR.name}
    for row in rows:
        level = row.level
        floor = floors.get((row.round, level.clients))
        errors = ", ".join(f"{n} x {kind}" for kind, n in level.errors.most_common()) or "0"
        table.add_row(
            str(row.round),
            str(level.clients),
            level.path,
            f"{level.rate:,.0f}",
            f"{level.rate / floor.rate:.2f}" if floor else "n/a",
            f"{1e6 / level.per_server_core:.0f} µs",
            f"{level.per_server_core:,.0f}",
            f"{level.per_server_core / floor.per_server_core:.2f}" if floor else "n/a",
            f"{level.p(50):.2f} ms",
            f"{level.p(99):.2f} ms",
            f"{level.server_cpu:.0%}",
            f"{level.loadgen_cpu:.0%}",
            row.load,
            errors,
        )
    console.print(table)
