"""Where a native step's server CPU goes, layer by layer, measured in one process without a profiler.

`sessions.py` measures the whole server under load; a profiler says which functions are hot but inflates
small calls. This script builds the real app (`create_app`, SQLite in a temporary directory, its lifespan
run) and times one step request entering it at each layer in turn, from the outside in, on the event
loop, with no socket: the ASGI app as uvicorn calls it, the gym's front (its stages in
turn), the session fast path's answer, the manager's `step`, the environment's
`step`. The difference between two rungs is what the layer between them costs per step. What the HTTP
server itself does per request (parsing HTTP, building the scope, writing the answer) is outside the app
and is not counted here: `sessions.py`'s floor (a bare Starlette app on the same server) shows it; the
last rung times that floor app's own handling of the same request in process, for scale. Then an
episode's create and close (the rest of its server CPU, with the acknowledged commits) are measured
apart: CPU time of the event loop's thread and of the store's writer thread per create + close,
`--episode-clients` at once.

The rungs take turns, `--rounds` times `--steps` steps each (a fresh `counter` session every 8 steps,
its create and close not timed); each session's 8 steps are one sample, and a rung reports the lower
quartile of its samples' means: interference from other work on a shared machine only ever adds time.

    python benchmarks/step_ladder.py [--steps 400] [--rounds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _sessions_system import machine_description
from _sessions_workload import STEP_BODY
from rich.console import Console
from rich.table import Table

from gym_server.api.schemas import StepRequest
from gym_server.app import create_app
from gym_server.core.problems import parse_body
from gym_server.core.settings import Settings
from gym_server.sessions.deadlines import step_with_deadline
from gym_server.sessions.manager import SessionManager

console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
STEPS_PER_SESSION = 8  # then a fresh session, so no episode reaches the counter's max_turns

Asgi = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


def _scope(app: Any, session_id: str) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 50000),
        "scheme": "http",
        "method": "POST",
        "root_path": "",
        "path": f"/v1/sessions/{session_id}/step",
        "raw_path": f"/v1/sessions/{session_id}/step".encode(),
        "query_string": b"",
        "headers": [
            (b"host", b"127.0.0.1:8000"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(STEP_BODY)).encode()),
        ],
        "state": {},
        "app": app,
    }


async def _receive() -> dict[str, Any]:
    return {"type": "http.request", "body": STEP_BODY, "more_body": False}


class _Sink:
    """The `send` of one request: keeps the status, to check every timed step succeeded."""

    __slots__ = ("status",)

    def __init__(self) -> None:
        self.status = 0

    async def __call__(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]


def _front_rungs(app: Any) -> list[tuple[str, Asgi]]:
    """(name, callable): the gym's front (its server-error handling and stages), then the session fast
    path's answer, the app its stage returns for a step."""
    front = app.front
    fast = next(stage for stage in front.stages if type(stage).__name__ == "SessionFastPath")

    async def fast_path(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await fast.take(scope, front.app)(scope, receive, send)

    return [("the front (its stages in turn)", front), ("SessionFastPath's answer", fast_path)]


async def _sample_rung(
    manager: SessionManager, step: Callable[[str], Awaitable[None]], steps: int, samples: list[float]
) -> None:
    """Append to `samples` the mean seconds per `step(session_id)` of each fresh session's 8 steps."""
    for _ in range(max(1, steps // STEPS_PER_SESSION)):
        session = await manager.create("counter", task_id="counter-0001", seed=1)
        gc.disable()
        started = time.perf_counter()
        for _ in range(STEPS_PER_SESSION):
            await step(session.id)
        samples.append((time.perf_counter() - started) / STEPS_PER_SESSION)
        gc.enable()
        await manager.close(session.id)


async def ladder(
    args: argparse.Namespace, workdir: Path
) -> tuple[list[tuple[str, float]], tuple[float, float]]:
    settings = Settings(
        database_url=f"sqlite:///{workdir}/ladder.db",
        server_name="ladder",
        sessions={"max_sessions": 1000},
    )
    app = create_app(settings)
    rungs: list[tuple[str, float]] = []
    async with app.router.lifespan_context(app):
        manager: SessionManager = app.state.manager

        def through(asgi: Asgi) -> Callable[[str], Awaitable[None]]:
            return _step_through(asgi, app)

        targets: list[tuple[str, Callable[[str], Awaitable[None]]]] = [
            ("the app as uvicorn calls it (FastAPI.__call__)", through(app))
        ]
        for name, layer in _front_rungs(app):
            targets.append((f"{name} and below", through(layer)))

        async def manager_step(session_id: str) -> None:
            body = parse_body(STEP_BODY, StepRequest)
            await manager.step(session_id, body.message.to_dict(), body.turn_data)

        async def manager_only(session_id: str) -> None:
            await manager.step(session_id, message, None)

        async def env_only(session_id: str) -> None:
            await step_with_deadline(manager.get(session_id).env, message, settings.limits)

        message = parse_body(STEP_BODY, StepRequest).message.to_dict()
        targets += [
            ("parse_body + SessionManager.step", manager_step),
            ("SessionManager.step (message already parsed)", manager_only),
            ("environment step (step_with_deadline)", env_only),
        ]
        floor = _floor_step()
        targets.append(("for scale: the bare Starlette echo app (the floor), same request", floor))
        samples: dict[str, list[float]] = {name: [] for name, _ in targets}
        for _ in range(args.rounds):  # rungs interleaved, so drift in the machine's load touches all alike
            for name, step in targets:
                await _sample_rung(manager, step, args.steps, samples[name])
        for name, _ in targets:
            rungs.append((name, statistics.quantiles(samples[name], n=4)[0]))
        episode = await _create_and_close_cpu(manager, args.episode_clients, args.episodes)
    return rungs, episode


def _step_through(asgi: Asgi, app: Any) -> Callable[[str], Awaitable[None]]:
    """A step request sent into `asgi` (a layer of `app`), checked to succeed."""

    async def step(session_id: str) -> None:
        sink = _Sink()
        await asgi(_scope(app, session_id), _receive, sink)
        if sink.status != 200:
            raise RuntimeError(f"step answered {sink.status}")

    return step


def _floor_step() -> Callable[[str], Awaitable[None]]:
    sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))
    from starlette_echo import app as echo

    return _step_through(echo, echo)


def _thread_cpu(name: str) -> float:
    thread = next(t for t in threading.enumerate() if t.name == name)
    assert thread.ident is not None
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


async def _create_and_close_cpu(manager: SessionManager, clients: int, episodes: int) -> tuple[float, float]:
    """CPU seconds per create + close on the event loop's thread and the store's writer thread, with
    `clients` episodes opening and closing at once (so acknowledged commits group as under load)."""

    async def episode() -> None:
        session = await manager.create("counter", task_id="counter-0001", seed=1)
        await manager.close(session.id)

    loop0, writer0 = time.thread_time(), _thread_cpu("trajectory-writer")
    for _ in range(max(1, episodes // clients)):
        await asyncio.gather(*(episode() for _ in range(clients)))
    loop1, writer1 = time.thread_time(), _thread_cpu("trajectory-writer")
    done = max(1, episodes // clients) * clients
    return (loop1 - loop0) / done, (writer1 - writer0) / done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=400, help="timed steps per rung and round")
    parser.add_argument("--rounds", type=int, default=20, help="turns each rung takes")
    parser.add_argument("--episodes", type=int, default=2048, help="episodes for the create + close CPU")
    parser.add_argument("--episode-clients", type=int, default=16, help="of them opening and closing at once")
    args = parser.parse_args(argv)
    if not 8 <= args.steps <= 1_000_000 or not 2 <= args.rounds <= 100:
        parser.error("--steps 8..1,000,000, --rounds 2..100 (each rung needs two samples at least)")
    if not 1 <= args.episode_clients <= 256 or not 1 <= args.episodes <= 1_000_000:
        parser.error("--episode-clients 1..256, --episodes 1..1,000,000")
    if (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {0})
    machine = machine_description()
    with tempfile.TemporaryDirectory(prefix="gym-ladder-") as workdir:
        rungs, (loop_cpu, writer_cpu) = asyncio.run(ladder(args, Path(workdir)))
    table = Table(title="one native step entering the app at each layer (lower quartile of 8-step means)")
    for column in ("entered at", "µs per step", "this layer alone"):
        table.add_column(column, justify="left" if column == "entered at" else "right")
    for index, (name, seconds) in enumerate(rungs):
        below = rungs[index + 1][1] if index + 1 < len(rungs) - 1 else 0.0
        table.add_row(name, f"{seconds * 1e6:.1f}", f"{(seconds - below) * 1e6:.1f}")
    console.print(table)
    console.print(
        f"create + close, {args.episode_clients} at once, {args.episodes} episodes: {loop_cpu * 1e6:.0f} µs "
        f"CPU on the event loop's thread and {writer_cpu * 1e6:.0f} µs on the store's writer thread each"
    )
    console.print(f"machine  {machine['cpu']}, {machine['cores']} cores; {machine['packages']}")
    console.print(f"code     git {machine['git']} (working tree as it is), {machine['date']}")
    load_end = " / ".join(Path("/proc/loadavg").read_text().split()[:3])
    console.print(f"load     average at start {machine['load']}, at end {load_end}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
