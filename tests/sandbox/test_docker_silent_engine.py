"""The Docker backend against an engine that accepts connections and never answers: the loop stays free.

Needs the docker SDK but no engine: the "engine" is a loopback listener nobody accepts from, the state a
wedged dockerd leaves its socket in. Every SDK call waits out its own timeout (30 s) there, so each one
must run off the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Iterator

import pytest

from gym_server.core.errors import SandboxUnavailable

pytest.importorskip("docker")

from gym_server.sandbox.docker import DockerBackend


@contextlib.contextmanager
def silent_engine() -> Iterator[str]:
    """A DOCKER_HOST on loopback whose kernel completes the handshake; closing it resets the waiters."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"tcp://127.0.0.1:{listener.getsockname()[1]}"


async def _longest_stall(seconds: float) -> float:
    """The longest the loop took to wake a 20 ms sleeper over `seconds`."""
    longest, until = 0.0, time.monotonic() + seconds
    while time.monotonic() < until:
        asked = time.monotonic()
        await asyncio.sleep(0.02)
        longest = max(longest, time.monotonic() - asked)
    return longest


@pytest.mark.parametrize("call", ["check", "start", "reap"])
async def test_a_silent_engine_never_blocks_the_event_loop(
    monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    backend = DockerBackend(server_name="gymtest-silent-engine")
    try:
        with silent_engine() as address:
            monkeypatch.setenv("DOCKER_HOST", address)
            waiting = asyncio.create_task(getattr(backend, call)())
            assert await _longest_stall(1.0) < 0.5
            assert not waiting.done()  # still waiting for the engine, on the backend's threads
        # The listener is gone: the engine connection is reset and the call ends at once.
        if call == "reap":
            assert await asyncio.wait_for(waiting, 10) == 0  # the timed reaper logs and carries on
        else:
            with pytest.raises(SandboxUnavailable, match="does not answer"):
                await asyncio.wait_for(waiting, 10)
    finally:
        await backend.aclose()
