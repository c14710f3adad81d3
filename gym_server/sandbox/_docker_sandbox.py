"""A running sandbox container of the Docker backend: exec, files, OOM probing, scrubbing, spawning.

Split from `docker.py` (the backend: container creation, the start gate, reaping) to keep each module to
one job. Every engine call goes through the backend's thread pool (`backend.submit`); an exec runs under
the wrapper of `_docker_exec.py`, so nothing it starts outlives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from gym_server.core.errors import SandboxUnavailable
from gym_server.sandbox._docker_exec import (
    ExecChannel,
    kill_all_argv,
    put_file_argv,
    scrub_argv,
    wrap_command,
)
from gym_server.sandbox._spawned import DockerSpawned
from gym_server.sandbox.egress import mount as egress_mount
from gym_server.sandbox.egress.proxy import EgressProxy
from gym_server.sandbox.protocol import (
    SIGKILL_EXIT,
    WORKDIR,
    CappedBuffer,
    Command,
    ExecResult,
    FileData,
    Limits,
    as_argv,
    sandbox_path,
)

if TYPE_CHECKING:
    from gym_server.sandbox.docker import DockerBackend

__all__ = ["EXEC_USER", "DockerSandbox", "engine_error"]

log = logging.getLogger(__name__)

EXEC_USER = "65534:65534"
_HOST_GRACE_S = 2.0  # the host's deadline trails the in-container `timeout` by this much
_OOM_PROBE = "cat /sys/fs/cgroup/memory/memory.oom_control /sys/fs/cgroup/memory.events 2>/dev/null"
_BASE_ENV = {"HOME": WORKDIR, "TMPDIR": "/tmp", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}


def engine_error(exc: BaseException, what: str) -> SandboxUnavailable:
    """A `SandboxUnavailable` naming what failed and the engine's own error."""
    return SandboxUnavailable(f"the Docker engine failed to {what}: {type(exc).__name__}: {exc}")


class DockerSandbox:
    """One running container; `exec` calls are serialized, files live in its tmpfs mounts."""

    def __init__(
        self, backend: DockerBackend, container_id: str, limits: Limits, session_id: str | None
    ) -> None:
        self.backend = backend
        self.id = container_id[:16]
        self.container_id = container_id
        self.limits = limits
        self.session_id = session_id
        self._lock = asyncio.Lock()
        self._closed = False
        self._oom_seen = 0
        self._spawned: set[DockerSpawned] = set()
        self.egress: EgressProxy | None = None  # the sandbox's proxy when it has an allow-list

    def __repr__(self) -> str:
        return f"DockerSandbox({self.id!r}, session={self.session_id!r}, closed={self._closed})"

    @property
    def closed(self) -> bool:
        return self._closed

    async def exec(
        self,
        cmd: Command,
        *,
        stdin: FileData | None = None,
        env: Mapping[str, str] | None = None,
        files: Mapping[str, FileData] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the sandbox's own deadline, not a caller's
        cwd: str | None = None,
    ) -> ExecResult:
        async with self._lock:
            if self._closed:
                raise SandboxUnavailable(f"sandbox {self.id} is closed")
            for path, data in (files or {}).items():
                await self._put(path, data)
            limit = timeout or self.limits.timeout_s
            # With a spawned process alive, the wrapper must not kill every process of the user.
            sweep = not any(process.alive for process in self._spawned)
            argv = wrap_command(self._behind_proxy(as_argv(cmd)), limit, sweep=sweep)
            payload = stdin.encode() if isinstance(stdin, str) else stdin
            environment = self._environment(env)
            return await self._run(argv, payload, environment, sandbox_path(cwd or WORKDIR), limit)

    def _behind_proxy(self, argv: list[str]) -> list[str]:
        """`argv` started behind the in-sandbox forwarder when the sandbox has egress."""
        return argv if self.egress is None else egress_mount.wrap_argv(argv)

    def _environment(self, env: Mapping[str, str] | None) -> dict[str, str]:
        proxy = egress_mount.proxy_env() if self.egress is not None else {}
        return {**_BASE_ENV, **proxy, **(env or {})}

    async def _run(
        self, argv: list[str], stdin: bytes | None, env: dict[str, str], cwd: str, limit: float
    ) -> ExecResult:
        out, err = CappedBuffer(self.limits.output_bytes), CappedBuffer(self.limits.output_bytes)
        channel = ExecChannel(self.backend.api, self.container_id, EXEC_USER)
        started = time.perf_counter()
        job = self.backend.submit(channel.run, argv, stdin, env, cwd, out, err)
        host_timed_out = False
        try:
            code = await asyncio.wait_for(asyncio.shield(job), limit + _HOST_GRACE_S)
        except TimeoutError:
            # The in-container deadline did not end the run (the wrapper itself was killed): end it here.
            host_timed_out = True
            code = await self._end_from_outside(job, channel)
        except Exception as exc:
            raise self._broken(exc) from exc
        duration = time.perf_counter() - started
        # A SIGKILL is the kernel's OOM killer when the container's counter moved, else the deadline
        # when the run lasted that long (`timeout -s KILL`), else the program's own doing.
        oom = code == SIGKILL_EXIT and not host_timed_out and await self._oom_happened()
        timed_out = host_timed_out or (code == SIGKILL_EXIT and not oom and duration >= limit)
        return ExecResult(
            exit_code=SIGKILL_EXIT if timed_out or code is None else code,
            stdout=out.getvalue(),
            stderr=err.getvalue(),
            stdout_truncated=out.truncated,
            stderr_truncated=err.truncated,
            timed_out=timed_out,
            oom_killed=oom,
            duration_s=duration,
            info={"stdout_bytes": out.total, "stderr_bytes": err.total},
        )

    async def _end_from_outside(self, job: asyncio.Future[int | None], channel: ExecChannel) -> int | None:
        with contextlib.suppress(Exception):
            await self._raw(kill_all_argv(), limit_s=5.0)
        try:
            return await asyncio.wait_for(asyncio.shield(job), 5.0)
        except (TimeoutError, Exception):
            channel.abort()
            log.warning("sandbox %s: exec did not end after kill; removing the container", self.id)
            await self.close()
            return None

    def _broken(self, exc: BaseException) -> SandboxUnavailable:
        if isinstance(exc, SandboxUnavailable):
            return exc
        return engine_error(exc, f"run a command in sandbox {self.id}")

    async def _raw(
        self, argv: list[str], *, stdin: bytes | None = None, limit_s: float = 10.0
    ) -> tuple[int | None, bytes]:
        """An exec without the wrapper (for file transfer and probes); returns (exit code, stdout)."""
        out, err = CappedBuffer(self.limits.output_bytes), CappedBuffer(4096)
        channel = ExecChannel(self.backend.api, self.container_id, EXEC_USER)
        job = self.backend.submit(channel.run, argv, stdin, dict(_BASE_ENV), WORKDIR, out, err)
        try:
            code = await asyncio.wait_for(asyncio.shield(job), limit_s)
        except TimeoutError:
            channel.abort()
            raise
        except Exception as exc:
            raise self._broken(exc) from exc
        if code != 0 and err.total:
            log.debug("sandbox %s: %s failed: %r", self.id, argv[:3], err.getvalue()[:200])
        return code, out.getvalue()

    async def _oom_happened(self) -> bool:
        """Whether the kernel's OOM killer fired in this container since we last looked."""
        try:
            _, text = await self._raw(["/bin/sh", "-c", _OOM_PROBE])
        except (SandboxUnavailable, TimeoutError):
            return False
        count = 0
        for line in text.decode(errors="replace").splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                count = int(value)
        happened = count > self._oom_seen
        self._oom_seen = max(count, self._oom_seen)
        return happened

    async def _put(self, path: str, data: FileData) -> None:
        target = sandbox_path(path)
        payload = data.encode() if isinstance(data, str) else bytes(data)
        code, _ = await self._raw(put_file_argv(target), stdin=payload, limit_s=30.0)
        if code != 0:
            raise PermissionError(
                f"cannot write {path!r} in the sandbox (only {WORKDIR} and /tmp are writable)"
            )

    async def put_file(self, path: str, data: FileData) -> None:
        async with self._lock:
            await self._put(path, data)

    async def get_file(self, path: str, max_bytes: int | None = None) -> bytes:
        target = sandbox_path(path)
        limit = max_bytes or self.limits.output_bytes
        script = 'test -f "$1" && ! test -L "$1" || exit 2; head -c "$2" -- "$1"'
        async with self._lock:
            code, data = await self._raw(
                ["/bin/sh", "-c", script, "gym-get", target, str(limit)], limit_s=30.0
            )
        if code == 2:
            raise FileNotFoundError(path)
        if code != 0:
            raise OSError(f"cannot read {path!r} in the sandbox (exit {code})")
        return data[:limit]

    async def spawn(
        self, cmd: Command, *, env: Mapping[str, str] | None = None, cwd: str | None = None
    ) -> DockerSpawned:
        if self._closed:
            raise SandboxUnavailable(f"sandbox {self.id} is closed")
        argv = ["setsid", "-w", "/bin/sh", "-c", 'echo $$; exec "$@"', "gym-spawn"]
        argv += self._behind_proxy(as_argv(cmd))
        environment = self._environment(env)
        try:
            created = await self.backend.submit(
                self.backend.api.exec_create,
                self.container_id,
                argv,
                stdin=True,
                stdout=True,
                stderr=False,
                user=EXEC_USER,
                environment=environment,
                workdir=sandbox_path(cwd or WORKDIR),
            )
            conn = await self.backend.submit(self.backend.api.exec_start, created["Id"], socket=True)
        except Exception as exc:
            raise self._broken(exc) from exc
        process = DockerSpawned(conn, self._kill_group, asyncio.get_running_loop())
        try:
            await process.start(10.0)
        except (EOFError, TimeoutError, ValueError) as exc:
            await process.kill()
            raise SandboxUnavailable(f"sandbox {self.id} could not start {argv[-1]!r}: {exc}") from exc
        self._spawned.add(process)
        return process

    async def _kill_group(self, pid: int) -> None:
        await self._raw(["/bin/sh", "-c", f"kill -9 -{pid} {pid} 2>/dev/null; true"], limit_s=10.0)
        self._spawned = {process for process in self._spawned if process.alive and process.pid != pid}

    async def scrub(self) -> bool:
        """Make a used sandbox fit for the next borrower: kill everything, empty /work, /tmp, /dev/shm."""
        async with self._lock:
            if self._closed:
                return False
            try:
                code, _ = await self._raw(scrub_argv(), limit_s=10.0)
            except (SandboxUnavailable, TimeoutError):
                return False
            return code == 0

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self.backend.remove(self.container_id)
            for process in self._spawned:
                process.pid = None  # its container is gone; only the connection is left to close
                await process.kill()
            self._spawned.clear()
        finally:
            if self.egress is not None:
                await self.egress.aclose()
