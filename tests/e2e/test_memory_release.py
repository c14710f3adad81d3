"""Closing sessions gives their memory back: a real server that held 150 transcripts of 1 MB returns
near its baseline RSS after closing them (before glibc's mmap threshold was fixed it kept most of its
peak; benchmarks/memory.py measures the full 1,000-session case)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from conftest import ServerProcess
from gymtest import poll

pytestmark = pytest.mark.slow

SESSIONS = 150
PAYLOAD = "x" * (1024 * 1024)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


async def _open(client: httpx.AsyncClient, gate: asyncio.Semaphore, index: int) -> str:
    async with gate:
        created = await client.post("/v1/sessions", json={"env": "counter", "task_id": "counter-0000"})
        session_id = str(created.json()["session_id"])
        message = {"role": "assistant", "content": f"{PAYLOAD}{index}"}
        stepped = await client.post(f"/v1/sessions/{session_id}/step", json={"message": message})
        assert stepped.status_code == 200, stepped.text
        return session_id


async def _close(client: httpx.AsyncClient, gate: asyncio.Semaphore, session_id: str) -> None:
    async with gate:
        assert (await client.delete(f"/v1/sessions/{session_id}")).status_code == 204


def test_memory_of_closed_large_transcripts_is_given_back(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    server = server_factory(f"sqlite:///{tmp_path / 'gym.db'}")
    server.start()
    assert server.process is not None
    pid = server.process.pid

    async def run() -> tuple[float, float]:
        gate = asyncio.Semaphore(16)
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            for index in range(3):  # every code path warmed before the baseline
                await _close(client, gate, await _open(client, gate, index))
            baseline = rss_mb(pid)
            ids = await asyncio.gather(*(_open(client, gate, i) for i in range(SESSIONS)))
            peak = rss_mb(pid)
            await asyncio.gather(*(_close(client, gate, session_id) for session_id in ids))
        return baseline, peak

    baseline, peak = asyncio.run(run())
    assert peak - baseline > SESSIONS * 0.8  # the transcripts really were held
    poll(lambda: rss_mb(pid), lambda rss: rss - baseline < 0.2 * (peak - baseline))
