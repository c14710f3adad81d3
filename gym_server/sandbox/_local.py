"""What the two local backends (bubblewrap and the unsafe runner) share: host folders, files, exec.

A local sandbox is a host folder `<root>/<server>.<pid>/<id>/` holding `work/` and `tmp/` (private tmpfs
mounts of `disk_mb` each when we are root), plus optionally a cgroup and a host uid of its own. Each
`exec` is one host process tree built by the backend's `command()`; this module runs it with the
deadline, output caps and OOM accounting, and reads the real exit status from bubblewrap's status pipe
so that a program cannot disguise its own failure as a broken sandbox. The folder name carries the
server's pid and start time, so `reap()` can tell a crashed server's leftovers from a live one's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from gym_server.errors import SandboxUnavailable
from gym_server.sandbox import _hostfs
from gym_server.sandbox._host import orphan_reaper, start_time, unmount_below
from gym_server.sandbox._process import run_capped
from gym_server.sandbox._spawned import LocalSpawned
from gym_server.sandbox.cgroups import CgroupManager, SandboxCgroup
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

__all__ = ["BASE_ENV", "LocalBackendBase", "LocalSandbox"]

log = logging.getLogger(__name__)

_SPAWN_CPU_S = 24 * 3600.0  # RLIMIT_CPU of a spawned process: its callers time each request instead
_HOST_ENV = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin"}  # all the host environment a sandbox process gets
BASE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": WORKDIR,
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
}


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
            status = _read_status(read_fd) if read_fd >= 0 else {}
            if isinstance(status.get("child-pid"), int):
                orphan_reaper().add(int(str(status["child-pid"])))
        finally:
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
                if isinstance(status.get("child-pid"), int):
                    orphan_reaper().add(int(str(status["child-pid"])))
            self._spawned.discard(process)

        process = LocalSpawned(proc, on_exit)
        self._spawned.add(process)
        return process

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
            await asyncio.to_thread(self.backend.destroy, self)


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


class LocalBackendBase:
    """Host folders, uids, cgroups and reaping for backends whose sandboxes are host process trees."""

    name: ClassVar[str] = "local"
    uses_status_fd: ClassVar[bool] = True
    UID_BASE: ClassVar[int] = 3_000_000  # above the usual /etc/subuid ranges
    UID_SPAN: ClassVar[int] = 1_000_000

    def __init__(self, *, root_dir: Path | None, server_name: str, use_cgroups: bool) -> None:
        self.root_dir = root_dir or Path(tempfile.gettempdir()) / "gym-sandbox"
        self.server_name = re.sub(r"[^A-Za-z0-9_.-]", "_", server_name)[:64] or "gym"
        self.is_root = os.geteuid() == 0
        pid = os.getpid()
        self.instance = f"{self.server_name}.{pid}.{start_time(pid)}"
        self.instance_dir = self.root_dir / self.instance
        self._use_cgroups = use_cgroups
        self._cgroups: CgroupManager | None = None
        self._prepared = False
        self._uids: set[int] = set()
        self._sandboxes: dict[str, LocalSandbox] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(instance={self.instance!r}, live={len(self._sandboxes)})"

    # -- what a backend defines ------------------------------------------------------------------

    def command(
        self,
        sandbox: LocalSandbox,
        argv: list[str],
        env: Mapping[str, str],
        cwd: str,
        timeout: float,
        status_fd: int,
    ) -> tuple[list[str], str]:
        """The host argv running `argv` in `sandbox`, and the host folder to start it in."""
        raise NotImplementedError

    def new_uid(self) -> int | None:
        return None

    def _prepare_instance(self) -> None:
        """Create what all of this server's sandboxes share, once."""

    def _prepare_sandbox(self, folder: Path, limits: Limits, uid: int | None) -> None:
        for name in ("work", "tmp"):
            (folder / name).mkdir(mode=0o700)

    # -- shared machinery ------------------------------------------------------------------------

    def environment(self, extra: Mapping[str, str]) -> dict[str, str]:
        env = dict(BASE_ENV)
        for key, value in extra.items():
            if not key or "=" in key or "\0" in key or "\0" in value:
                raise ValueError(f"invalid environment variable {key!r}")
            env[key] = value
        return env

    def write_host_file(self, sandbox: LocalSandbox, base: Path, parts: list[str], data: bytes) -> None:
        _hostfs.write_file(base, parts, data, owner=sandbox.uid)

    def _prepare(self) -> None:
        if self._prepared:
            return
        self.root_dir.mkdir(mode=0o711, parents=True, exist_ok=True)
        self.root_dir.chmod(0o711)
        self.instance_dir.mkdir(mode=0o711, exist_ok=True)
        self._prepare_instance()
        if self.uses_status_fd:
            orphan_reaper()  # before the first sandbox, so its init's orphan comes to us
        if self._use_cgroups and self.is_root:
            self._cgroups = CgroupManager.detect()
        self._prepared = True

    def _create(self, limits: Limits, session_id: str | None, uid: int | None) -> LocalSandbox:
        self._prepare()
        sandbox_id = uuid.uuid4().hex[:16]
        folder = self.instance_dir / sandbox_id
        folder.mkdir(mode=0o711)
        cgroup: SandboxCgroup | None = None
        try:
            self._prepare_sandbox(folder, limits, uid)
            if self._cgroups is not None:
                cgroup = self._cgroups.create(
                    f"{self.instance}.{sandbox_id}",
                    memory_bytes=limits.memory_mb * 1024 * 1024,
                    pids=limits.pids,
                    cpus=limits.cpus,
                )
        except OSError as exc:
            self._remove_folder(folder)
            raise SandboxUnavailable(f"could not create a {self.name} sandbox: {exc}") from exc
        sandbox = LocalSandbox(
            self, sandbox_id, limits, folder, uid=uid, cgroup=cgroup, session_id=session_id
        )
        self._sandboxes[sandbox_id] = sandbox
        return sandbox

    async def create_async(self, limits: Limits, session_id: str | None, uid: int | None) -> LocalSandbox:
        """`_create` on a thread; a sandbox whose caller was cancelled meanwhile is destroyed, not leaked."""
        job = asyncio.ensure_future(asyncio.to_thread(self._create, limits, session_id, uid))
        try:
            return await asyncio.shield(job)
        except asyncio.CancelledError:
            job.add_done_callback(
                lambda done: None if done.cancelled() or done.exception() else self.destroy(done.result())
            )
            raise

    def destroy(self, sandbox: LocalSandbox) -> None:
        """Kill whatever is left, remove the cgroup, unmount and delete the folder (blocking)."""
        self._sandboxes.pop(sandbox.id, None)
        if sandbox.cgroup is not None:
            sandbox.cgroup.remove()
        self._remove_folder(sandbox.folder)
        if sandbox.uid is not None:
            self._uids.discard(sandbox.uid)

    def _remove_folder(self, folder: Path) -> None:
        if self.is_root:
            with contextlib.suppress(OSError):
                unmount_below(folder)
        shutil.rmtree(folder, ignore_errors=True)

    async def reap(self) -> int:
        """Remove the folders, mounts and cgroups of this host's dead servers' sandboxes."""
        return await asyncio.to_thread(self._reap)

    def _reap(self) -> int:
        removed = 0
        if not self.root_dir.is_dir():
            return 0
        for folder in self.root_dir.iterdir():
            _, _, rest = folder.name.rpartition(".")
            name_pid = folder.name.rsplit(".", 2)
            if folder == self.instance_dir or len(name_pid) != 3 or not name_pid[1].isdigit():
                continue
            if start_time(int(name_pid[1])) == rest:
                continue  # another live server on this host owns it
            removed += sum(1 for child in folder.iterdir() if child.name != "etc") if folder.is_dir() else 0
            self._remove_folder(folder)
            if self._cgroups is None and self._use_cgroups and self.is_root:
                self._cgroups = CgroupManager.detect()
            if self._cgroups is not None:
                self._cgroups.reap(folder.name + ".")
        return removed

    async def aclose(self) -> None:
        for sandbox in list(self._sandboxes.values()):
            await sandbox.close()
        await asyncio.to_thread(self._remove_folder, self.instance_dir)
        if self.uses_status_fd:
            await asyncio.to_thread(orphan_reaper().reap, 2.0)
        self._prepared = False
