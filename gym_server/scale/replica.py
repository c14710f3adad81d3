"""One gym replica on a Ray node: a Ray actor that runs `gym-server serve` as its child process.

The replica is the real server (uvloop, httptools, the fast session path), not an app mounted inside a
Ray worker, so a step through the cluster costs what a step on one machine costs. The child dies with the
actor (PR_SET_PDEATHSIG): when Ray kills the actor, or its node goes, no replica is left holding a port
and sandboxes. The actor is threaded, so health checks are answered while a start or stop runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

_PR_SET_PDEATHSIG = 1


class ReplicaStartError(RuntimeError):
    """The replica process exited, or did not answer its health check in time."""


def _die_with_parent() -> None:
    # Runs in the child between fork and exec; Linux only, skipped elsewhere.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


class ReplicaProcess:
    """Ray actor body (wrapped by `ray.remote` in `gym_server.scale.pool`): start, watch and stop one replica.

    Args:
        name: the replica's server name (`GYM_SERVER_NAME`): its rows in the store carry it, so a dead
            replica's live sessions can be marked lost by name.
        env: the gym's settings as environment variables (`GYM_*`), the same on every node.
    """

    def __init__(self, name: str, env: dict[str, str]) -> None:
        self._name = name
        self._env = {**os.environ, **env, "GYM_SERVER_NAME": name}
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float) -> tuple[str, int, str]:
        """Start the server on a free port of this node's address and wait until it answers; returns the
        host, the port and the Ray node id."""
        import ray  # inside the actor: the module is importable without Ray for its docs and types

        ray_api: Any = ray  # typed Any: the same with Ray's stubs or none
        host: str = ray_api.util.get_node_ip_address()
        node_id: str = ray_api.get_runtime_context().get_node_id()
        port = _free_port(host)
        # The cluster's address, for a replica that leases sandboxes from the sandbox hosts (backend ray).
        env = {**self._env, "RAY_ADDRESS": ray_api.get_runtime_context().gcs_address}
        self._process = subprocess.Popen(
            [sys.executable, "-m", "gym_server", "serve", "--host", host, "--port", str(port)],
            env=env,
            preexec_fn=_die_with_parent,
        )
        deadline = time.monotonic() + timeout_s
        url = f"http://{'[' + host + ']' if ':' in host else host}:{port}/healthz"
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise ReplicaStartError(f"replica {self._name} exited with {self._process.returncode}")
            with (
                contextlib.suppress(OSError, urllib.error.URLError),
                # 5 s, not 1: a replica warming its catalog on a loaded node answers slowly, and a probe
                # cut at 1 s every time never saw it up (the Ray interop tests at load 9-14)
                urllib.request.urlopen(url, timeout=5) as answer,
            ):
                if answer.status == 200:
                    return host, port, node_id
            time.sleep(0.1)
        self.stop(5.0)
        raise ReplicaStartError(f"replica {self._name} did not answer {url} within {timeout_s:g} s")

    def alive(self) -> bool:
        """Whether the server process still runs (the actor answering says its node is up)."""
        return self._process is not None and self._process.poll() is None

    def pid(self) -> int:
        """The server process's id (the tests kill it to prove a replica's death is survived)."""
        return self._process.pid if self._process is not None else -1

    def stop(self, timeout_s: float) -> int | None:
        """SIGTERM the server (it records its live sessions as lost and closes their sandboxes), then
        SIGKILL after `timeout_s`; returns its exit status."""
        process = self._process
        if process is None or process.poll() is not None:
            return None if process is None else process.returncode
        process.terminate()
        try:
            return process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()
