"""A sandbox of the local backends: files in host folders, each command one host process tree.

Each `exec` runs the argv its backend's `command()` builds, with the deadline, output caps and OOM
accounting, and reads the real exit status from bubblewrap's status pipe so that a program cannot
disguise its own failure as a broken sandbox. Split from `_local.py` (the backends' shared machinery:
folders, uids, cgroups, reaping).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from gym_server.core.errors import SandboxUnavailable
from gym_server.sandbox import _hostfs
from gym_server.sandbox._host import orphan_reaper
from gym_server.sandbox._process import run_capped
from gym_server.sandbox._spawned import LocalSpawned
from gym_server.sandbox.cgroups import SandboxCgroup
from gym_server.sandbox.egress.proxy import EgressProxy
from gym_server.sandbox.protocol import (
    SIGKILL_EXIT,
    WORKDIR,
    Command,
    ExecResult,
    FileData,
    Limits,
    as_argv,
    sandbox_path,
)

if TYPE_CHECKING:
    from gym_server.sandbox._local import LocalBackendBase

__all__ = ["LocalSandbox"]

log = logging.getLogger(__name__)

_SPAWN_CPU_S = 24 * 3600.0  # RLIMIT_CPU of a spawned process: its callers time each request instead
_HOST_ENV = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin"}  # all the host environment a sandbox process gets


class LocalSandbox:
    """A sandbox whose files live in a host folder and whose commands are host process trees."""

    def __init__(
        self,
        backend: LocalBackendBase,
        sandbox_id: str,
        limits: Limits,
        folder: Path,
        *,
        uid: int | None,
        cgroup: SandboxCgroup | None,
        session_id: str | None,
    ) -> None:
        self.backend = backend
        self.id = sandbox_id
        self.limits = limits
        self.folder = folder
        self.uid = uid
        self.cgroup = cgroup
        self.session_id = session_id
        self._lock = asyncio.Lock()
        self._closed = False
        self._spawned: set[LocalSpawned] = set()
        self.egress: EgressProxy | None = None  # the sandbox's proxy when it has an allow-list

    def __repr__(self) -> str:
        return f"LocalSandbox({self.id!r}, backend={self.backend.name!r}, closed={self._closed})"

    @property
    def closed(self) -> bool:
        return self._closed

    def host_path(self, path: str) -> tuple[Path, list[str]]:
        """The host folder and the components below it for an in-sandbox path in /work or /tmp."""
        parts = sandbox_path(path).strip("/").split("/")
        if parts[0] == WORKDIR.strip("/"):
            return self.folder / "work", parts[1:]
        if parts[0] == "tmp":
            return self.folder / "tmp", parts[1:]
        raise PermissionError(f"{path!r} is outside the writable folders {WORKDIR} and /tmp")

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
                await self.put_file(path, data)
            return await self._run(as_argv(cmd), stdin, env or {}, timeout or self.limits.timeout_s, cwd)

    async def _run(
        self, argv: list[str], stdin: FileData | None, env: Mapping[str, str], limit_s: float, cwd: str | None
    ) -> ExecResult:
        # Our copy of the status pipe's write end must be closed exactly once: a second close could hit
        # an unrelated fd that another thread has opened under the same number meanwhile.
        read_fd, write_fd = os.pipe() if self.backend.uses_status_fd else (-1, -1)
        open_fds = {fd for fd in (read_fd, write_fd) if fd >= 0}

        def close_write_end() -> None:
            if write_fd in open_fds:
                open_fds.discard(write_fd)
                os.close(write_fd)

        status: dict[str, object] = {}
        try:
            command, host_cwd = self.backend.command(
                self, argv, env, sandbox_path(cwd or WORKDIR), limit_s, write_fd
            )
            oom_before = self.cgroup.oom_kills() if self.cgroup else 0
            raw = await run_capped(
                command,
                stdin=stdin.encode() if isinstance(stdin, str) else stdin,
                env=_HOST_ENV,
                cwd=host_cwd,
                limit_s=limit_s,
                output_bytes=self.limits.output_bytes,
                # The pid namespace already ends the run's process tree; emptying the whole cgroup too is
                # only safe while no spawned process of this sandbox lives in it.
                kill_tree=self.cgroup.kill_all if self.cgroup and not self._spawned else None,
                pass_fds=(write_fd,) if write_fd >= 0 else (),
                after_spawn=close_write_end,
            )
        finally:
            # Also when the run was cancelled: bubblewrap's init is orphaned to us either way, and only
            # the pid it reported lets the reaper collect it.
            if read_fd >= 0:
                status = _read_status(read_fd)
                self._collect_init(status)
            for fd in list(open_fds):
                open_fds.discard(fd)
                os.close(fd)
        oom = bool(self.cgroup and self.cgroup.oom_kills() > oom_before)
        code = raw.exit_code
        if "exit-code" in status:
            code = int(str(status["exit-code"]))
        elif self.backend.uses_status_fd and not (raw.timed_out or oom):
            if "child-pid" not in status or raw.stderr.getvalue().startswith(b"bwrap:"):
                detail = raw.stderr.getvalue()[:500].decode("utf-8", "replace")
                raise SandboxUnavailable(f"the sandbox could not start the command: {detail}")
            code = SIGKILL_EXIT
        if (
            self.cgroup is None
            and not raw.timed_out
            and raw.stderr.getvalue().rstrip().endswith(b"MemoryError")
        ):
            oom = True  # rlimit-only mode: RLIMIT_AS makes Python raise instead of the kernel killing it
        return ExecResult(
            exit_code=SIGKILL_EXIT if raw.timed_out else code,
            stdout=raw.stdout.getvalue(),
            stderr=raw.stderr.getvalue(),
            stdout_truncated=raw.stdout.truncated,
            stderr_truncated=raw.stderr.truncated,
            timed_out=raw.timed_out,
            oom_killed=oom,
            duration_s=raw.duration_s,
            info={"stdout_bytes": raw.stdout.total, "stderr_bytes": raw.stderr.total},
        )

    async def put_file(self, path: str, data: FileData) -> None:
        base, parts = self.host_path(path)
        payload = data.encode() if isinstance(data, str) else bytes(data)
        await asyncio.to_thread(self.backend.write_host_file, self, base, parts, payload)

    async def get_file(self, path: str, max_bytes: int | None = None) -> bytes:
        base, parts = self.host_path(path)
        return await asyncio.to_thread(_hostfs.read_file, base, parts, max_bytes or self.limits.output_bytes)

    async def spawn(
        self, cmd: Command, *, env: Mapping[str, str] | None = None, cwd: str | None = None
    ) -> LocalSpawned:
        if self._closed:
            raise SandboxUnavailable(f"sandbox {self.id} is closed")
        read_fd, write_fd = os.pipe() if self.backend.uses_status_fd else (-1, -1)
        try:
            command, host_cwd = self.backend.command(
                self, as_argv(cmd), env or {}, sandbox_path(cwd or WORKDIR), _SPAWN_CPU_S, write_fd
            )
            proc = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
                env=_HOST_ENV,
                cwd=host_cwd,
                start_new_session=True,
                pass_fds=(write_fd,) if write_fd >= 0 else (),
            )
        except BaseException:
            for fd in (read_fd, write_fd):
                if fd >= 0:
                    os.close(fd)
            raise
        if write_fd >= 0:
            os.close(write_fd)

        def on_exit() -> None:
            if read_fd >= 0:
                status = _read_status(read_fd)
                os.close(read_fd)
                self._collect_init(status)
            self._spawned.discard(process)

        process = LocalSpawned(proc, on_exit)
        self._spawned.add(process)
        return process

    def _collect_init(self, status: dict[str, object]) -> None:
        """Have the reaper collect the namespace init of a bwrap that ended, by the pid it reported, or,
        where it was killed before it could report one, by looking for it."""
        if isinstance(status.get("child-pid"), int):
            orphan_reaper().add(int(str(status["child-pid"])))
        else:
            orphan_reaper().adopt_unreported(self.uid)

    async def scrub(self) -> bool:
        async with self._lock:
            if self._closed:
                return False
            try:
                await asyncio.to_thread(self._empty_folders)
            except OSError as exc:
                log.warning("sandbox %s could not be scrubbed: %s", self.id, exc)
                return False
            return True

    def _empty_folders(self) -> None:
        if self.cgroup is not None:
            self.cgroup.kill_all()
        for name in ("work", "tmp"):
            with os.scandir(self.folder / name) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        shutil.rmtree(entry.path)
                    else:
                        os.unlink(entry.path)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for process in list(self._spawned):
            await process.kill()
        async with self._lock:  # waits for a running exec, which its own deadline bounds
            try:
                await asyncio.to_thread(self.backend.destroy, self)
            finally:
                if self.egress is not None:
                    await self.egress.aclose()


def _read_status(fd: int) -> dict[str, object]:
    """bubblewrap's JSON status lines (child pid, then the exit code when the program exited)."""
    os.set_blocking(fd, False)
    data = b""
    with contextlib.suppress(BlockingIOError, OSError):
        while chunk := os.read(fd, 65536):
            data += chunk
    status: dict[str, object] = {}
    for line in data.splitlines():
        with contextlib.suppress(ValueError):
            status.update(json.loads(line))
    return status
