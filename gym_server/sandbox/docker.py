"""The Docker backend: one locked-down container per sandbox, commands run with `docker exec`.

Every container starts with no network, all capabilities dropped, no-new-privileges, a read-only root,
size-limited tmpfs mounts for the work dir and /tmp, memory with swap equal to it, a pids limit, a CPU
quota, tini as pid 1 (it reaps zombies) and labels naming the server, its instance and the session. The
main process runs as uid 65533 and every exec as 65534, so model code can kill its own processes but
never the one keeping the container alive.

An exec runs under a small shell wrapper: it kills whatever earlier runs left, runs the command under
`timeout -s KILL`, then kills every process of the sandbox user, so nothing outlives its exec. The host
keeps its own deadline a little later and, if the wrapper itself was killed, ends the run from outside.
All docker-SDK calls are blocking; they run on the backend's own thread pool so the event loop never
waits on the engine. Starts are bounded by a semaphore and a rate limit, so a burst of new sessions
cannot flood the daemon, and a reaper removes labelled containers a crashed server left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from gym_server.core.egress_policy import EgressPolicy
from gym_server.core.errors import SandboxUnavailable
from gym_server.sandbox._docker_sandbox import DockerSandbox, engine_error
from gym_server.sandbox._host import start_time
from gym_server.sandbox.egress import mount as egress_mount
from gym_server.sandbox.egress.proxy import EgressProxy
from gym_server.sandbox.images import DEFAULT_IMAGE
from gym_server.sandbox.protocol import (
    WORKDIR,
    Limits,
)
from gym_server.sandbox.toolbox import docker_volumes

__all__ = [
    "LABEL_HOST",
    "LABEL_INSTANCE",
    "LABEL_MANAGED",
    "LABEL_OWNER",
    "LABEL_SERVER",
    "DockerBackend",
    "DockerSandbox",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

LABEL_MANAGED = "gym-server.managed"
LABEL_SERVER = "gym-server.server"
LABEL_INSTANCE = "gym-server.instance"
LABEL_SESSION = "gym-server.session"
LABEL_HOST = "gym-server.host"
LABEL_OWNER = "gym-server.owner"  # "<boot id>/<pid namespace>/<pid>/<start time>" of the maker
_HOSTNAME = socket.gethostname()
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
_PID_NS = os.readlink("/proc/self/ns/pid")
_OWNER = f"{_BOOT_ID}/{_PID_NS}/{os.getpid()}/{start_time(os.getpid())}"
_REAP_MIN_AGE_S = 60.0


class DockerBackend:
    """Sandboxes as containers of `image` on the engine the docker SDK finds (DOCKER_HOST or the socket).

    Args:
        image: the sandbox image (build it offline with `gym-server sandbox build-image`).
        server_name: labels every container, so a restart of this server reaps what it left.
        client_factory: builds the `docker.DockerClient`; tests pass one pointing elsewhere.
        max_starts: containers being created at once.
        starts_per_s: sustained container creations per second.
        threads: threads for blocking SDK calls (each running exec holds one).
        tools_dir: a host folder shown read-only at `toolbox.TOOLS_MOUNT` (see `toolbox`).
    """

    name = "docker"

    def __init__(
        self,
        *,
        image: str = DEFAULT_IMAGE,
        server_name: str = "gym",
        client_factory: Callable[[], Any] | None = None,
        max_starts: int = 4,
        starts_per_s: float = 20.0,
        threads: int = 64,
        tools_dir: Path | None = None,
    ) -> None:
        self.image = image
        self.tools_dir = tools_dir
        self.server_name = server_name
        self.instance = uuid.uuid4().hex[:12]
        self._client_factory = client_factory
        self._client: Any = None
        self._connecting = asyncio.Lock()
        self._threads = threads
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="gym-docker")
        self._start_gate: asyncio.Semaphore | None = None
        self._max_starts = max_starts
        self._start_interval = 1.0 / starts_per_s
        self._next_start = 0.0
        self._live: dict[str, DockerSandbox] = {}
        self._removals: set[asyncio.Future[None]] = set()
        self._checked = False
        self._reaper: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"DockerBackend(image={self.image!r}, instance={self.instance!r}, live={len(self._live)})"

    async def connect(self) -> Any:
        """The `docker.DockerClient`, made on the backend's threads at first use.

        Making one is itself a blocking call: without a pinned API version the SDK asks the engine for
        its version, which waits out the 30 s timeout on an engine that accepts and never answers.
        """
        async with self._connecting:
            if self._client is None:
                self._client = await self.submit(self._make_client)
            return self._client

    def _make_client(self) -> Any:
        import docker

        return self._client_factory() if self._client_factory else docker.from_env(timeout=30)

    @property
    def api(self) -> Any:
        """The low-level API of the connected client (sandboxes exist only after `start()` connected)."""
        if self._client is None:
            raise SandboxUnavailable("the Docker backend is not connected to an engine")
        return self._client.api

    def submit(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> asyncio.Future[T]:
        """Run a blocking SDK call on the backend's threads."""
        return asyncio.get_running_loop().run_in_executor(self._executor, partial(fn, *args, **kwargs))

    async def check(self) -> None:
        """Ping the engine and look for the image; a clear `SandboxUnavailable` otherwise."""
        if self._checked:
            return
        try:
            client = await self.connect()
            await self.submit(client.ping)
        except Exception as exc:
            self._client = None
            raise SandboxUnavailable(
                f"the Docker engine does not answer ({type(exc).__name__}: {exc})"
            ) from exc
        from gym_server.sandbox.images import image_exists

        if not await self.submit(image_exists, client, self.image):
            raise SandboxUnavailable(
                f"the sandbox image {self.image!r} is not in the Docker engine; "
                "build it with `gym-server sandbox build-image`"
            )
        self._checked = True
        await self.reap()

    def _run_options(
        self, limits: Limits, session_id: str | None, egress: EgressProxy | None = None
    ) -> dict[str, Any]:
        import docker.types

        mb = 1024 * 1024
        tmpfs = f"rw,exec,nosuid,nodev,size={limits.disk_mb}m,uid=65534,gid=65534"
        labels = {
            LABEL_MANAGED: "1",
            LABEL_SERVER: self.server_name,
            LABEL_INSTANCE: self.instance,
            LABEL_HOST: _HOSTNAME,
            LABEL_OWNER: _OWNER,
        }
        if session_id:
            labels[LABEL_SESSION] = session_id
        return {
            "command": ["sleep", "infinity"],
            "detach": True,
            "init": True,
            "user": "65533:65533",
            "network_mode": "none",
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "read_only": True,
            "tmpfs": {WORKDIR: f"{tmpfs},mode=0755", "/tmp": f"{tmpfs},mode=1777"},
            "volumes": {
                **docker_volumes(self.tools_dir),
                **egress_mount.docker_volumes(egress.folder if egress else None),
            },
            "shm_size": f"{min(limits.disk_mb, 64)}m",
            "mem_limit": limits.memory_mb * mb,
            "memswap_limit": limits.memory_mb * mb,
            "pids_limit": limits.pids,
            "nano_cpus": int(limits.cpus * 1e9),
            "ulimits": [
                docker.types.Ulimit(
                    name="fsize", soft=limits.file_size_mb * mb, hard=limits.file_size_mb * mb
                ),
                docker.types.Ulimit(name="nofile", soft=limits.open_files, hard=limits.open_files),
                docker.types.Ulimit(name="core", soft=0, hard=0),
            ],
            "hostname": "sandbox",
            "working_dir": WORKDIR,
            "labels": labels,
        }

    async def start(
        self,
        limits: Limits | None = None,
        *,
        session_id: str | None = None,
        egress: EgressPolicy | None = None,
    ) -> DockerSandbox:
        await self.check()
        limits = limits or Limits()
        proxy = None if egress is None else EgressProxy(egress, session_id=session_id)
        try:
            if proxy is not None:
                await proxy.start()
            sandbox = await self._start_container(limits, session_id, proxy)
        except BaseException:
            if proxy is not None:
                await proxy.aclose()
            raise
        sandbox.egress = proxy
        return sandbox

    async def _start_container(
        self, limits: Limits, session_id: str | None, proxy: EgressProxy | None
    ) -> DockerSandbox:
        if self._start_gate is None:
            self._start_gate = asyncio.Semaphore(self._max_starts)
        async with self._start_gate:
            now = time.monotonic()
            wait, self._next_start = self._next_start - now, max(now, self._next_start) + self._start_interval
            if wait > 0:
                await asyncio.sleep(wait)
            options = self._run_options(limits, session_id, proxy)
            client = await self.connect()
            job = self.submit(client.containers.run, self.image, **options)
            try:
                container = await asyncio.shield(job)
            except asyncio.CancelledError:
                job.add_done_callback(self._discard_orphan)  # the engine finishes it; remove it then
                raise
            except Exception as exc:
                raise engine_error(exc, "start a sandbox container") from exc
        sandbox = DockerSandbox(self, str(container.id), limits, session_id)
        self._live[sandbox.container_id] = sandbox
        return sandbox

    def _discard_orphan(self, job: asyncio.Future[Any]) -> None:
        if not job.cancelled() and job.exception() is None:
            removal = asyncio.ensure_future(self.remove(str(job.result().id)))
            self._removals.add(removal)
            removal.add_done_callback(self._removals.discard)

    async def remove(self, container_id: str) -> None:
        """Force-remove a container and wait until the engine has (a removal in progress counts)."""
        self._live.pop(container_id, None)
        for _ in range(50):
            try:
                api = (await self.connect()).api
                await self.submit(api.remove_container, container_id, force=True)
                return
            except Exception as exc:
                status = getattr(getattr(exc, "response", None), "status_code", None)
                if status == 404:
                    return
                if status != 409:  # 409: another removal is in progress; wait for it to finish
                    log.warning("could not remove sandbox container %s: %s", container_id[:12], exc)
                    return
            await asyncio.sleep(0.1)

    async def reap(self) -> int:
        """Remove labelled containers whose owner is gone; returns how many.

        A container is stale when it is ours but no live sandbox holds it (and it is over a minute old,
        so one still starting is spared); when the process that made it ran in our pid namespace on
        this boot and has exited (a crashed server, CLI or test run, whatever its server name); or when
        it carries our server name but comes from another machine or boot (this replica, restarted).
        Containers whose owner we cannot see (another pid namespace, e.g. a server in a container
        sharing the engine) are left alone unless they carry our name from another boot or machine.
        """
        try:
            api = (await self.connect()).api
            found = await self.submit(api.containers, all=True, filters={"label": f"{LABEL_MANAGED}=1"})
        except Exception as exc:
            log.warning("sandbox reaper could not list containers: %s", exc)
            return 0
        stale = [c["Id"] for c in found if c["Id"] not in self._live and self._is_stale(c)]
        for container_id in stale:
            await self.remove(container_id)
        if stale:
            log.info("sandbox reaper removed %d leftover container(s)", len(stale))
        return len(stale)

    def _is_stale(self, container: dict[str, Any]) -> bool:
        labels = container.get("Labels") or {}
        if labels.get(LABEL_INSTANCE) == self.instance:
            return float(container.get("Created", 0)) < time.time() - _REAP_MIN_AGE_S
        boot, pidns, pid, started = [*str(labels.get(LABEL_OWNER, "")).split("/"), "", "", "", ""][:4]
        if boot == _BOOT_ID and pidns == _PID_NS:
            # Made by a process we can see: stale exactly when that process is gone.
            return not (pid.isdigit() and start_time(int(pid)) == started)
        if boot == _BOOT_ID:
            return False  # another pid namespace on this machine (a container): its liveness is unknown
        return bool(labels.get(LABEL_SERVER) == self.server_name)  # this replica, before a restart

    def start_reaper(self, interval_s: float = 60.0) -> None:
        """Reap on a timer until `aclose()` (call from a running event loop)."""

        async def loop() -> None:
            while True:
                await asyncio.sleep(interval_s)
                await self.reap()

        if self._reaper is None:
            self._reaper = asyncio.get_running_loop().create_task(loop(), name="gym-docker-reaper")

    async def aclose(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None
        for sandbox in list(self._live.values()):
            await sandbox.close()
        # Starts still in flight finish on the pool's threads; wait for them, then remove whatever this
        # instance still has in the engine.
        executor, self._executor = (
            self._executor,
            ThreadPoolExecutor(self._threads, thread_name_prefix="gym-docker"),
        )
        await asyncio.to_thread(executor.shutdown, wait=True)
        await asyncio.sleep(0)  # lets the done-callbacks of cancelled starts schedule their removals
        if self._removals:
            await asyncio.gather(*self._removals, return_exceptions=True)
        if self._client is not None:
            filters = {"label": [f"{LABEL_MANAGED}=1", f"{LABEL_INSTANCE}={self.instance}"]}
            with contextlib.suppress(Exception):
                for found in await self.submit(self.api.containers, all=True, filters=filters):
                    await self.remove(found["Id"])
            # Its connection pool holds sockets to the engine; a later use connects afresh.
            client, self._client = self._client, None
            with contextlib.suppress(Exception):
                await asyncio.to_thread(client.close)
        self._checked = False
