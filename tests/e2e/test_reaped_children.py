"""Every process a real server starts is reaped: none of its children, zombies included, outlives its use.

bubblewrap leaves its namespace's init orphaned to the server (a child subreaper) for a moment after each
run; the server must collect it, and not only when the next sandbox happens to start. The readiness
probe's own bwrap counts too, and so do the first sessions after start-up.
"""

from __future__ import annotations

import asyncio
import glob
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from conftest import ServerProcess
from gymtest import apoll, call

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]

SEQUENTIAL = 6
CONCURRENT = 6


def children(pid: int) -> list[str]:
    """The server's child processes (any thread's), each as `pid name state`: a zombie shows as Z."""
    found: list[str] = []
    for listing in glob.glob(f"/proc/{pid}/task/*/children"):
        for child in Path(listing).read_text().split():
            try:
                stat = Path(f"/proc/{child}/stat").read_text()
            except OSError:
                continue  # reaped between the two reads
            name, _, rest = stat.partition("(")[2].rpartition(")")
            found.append(f"{child} {name} {rest.split()[0]}")
    return found


async def python_session(client: httpx.AsyncClient, task_id: str) -> None:
    """The acceptance run's episode: an interpreter told to exit, a cell after it, then DELETE."""
    created = await client.post("/v1/sessions", json={"env": "python_repl", "task_id": task_id})
    assert created.status_code == 201, created.text
    session_id = created.json()["session_id"]
    replies = []
    for code in ("import sys; sys.exit(0)", "print(6 * 7)"):
        step = await client.post(
            f"/v1/sessions/{session_id}/step", json={"message": call("run_python", {"code": code})}
        )
        assert step.status_code == 200, step.text
        replies.append(step.json()["messages"][0]["content"])
    assert "42" in replies[-1]
    assert (await client.delete(f"/v1/sessions/{session_id}")).status_code == 204


async def no_children_left(pid: int) -> None:
    """Wait (to a generous deadline) for the server's child list to be empty; fails naming what is left."""
    await apoll(lambda: asyncio.to_thread(children, pid), lambda found: found == [], timeout_s=20)


async def test_no_child_of_the_server_outlives_its_sandbox(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    server = server_factory(f"sqlite:///{tmp_path / 'gym.db'}", GYM_SANDBOX__BACKEND="bubblewrap")
    server.start()  # polls /readyz, whose probe runs a bwrap of its own
    assert server.process is not None
    pid = server.process.pid
    await no_children_left(pid)
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        tasks = (await client.get("/v1/environments/python_repl/tasks", params={"limit": 1})).json()
        task_id = tasks["tasks"][0]["id"]
        for _ in range(SEQUENTIAL):  # the first sessions after start-up, one at a time
            await python_session(client, task_id)
            await no_children_left(pid)
        await asyncio.gather(*(python_session(client, task_id) for _ in range(CONCURRENT)))
        await no_children_left(pid)
        assert (await client.get("/readyz")).status_code == 200  # a fresh probe, after the sessions
        await no_children_left(pid)
