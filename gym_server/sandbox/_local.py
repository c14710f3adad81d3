"""What the two local backends (bubblewrap and the unsafe runner) share: host folders, uids, cgroups.

A local sandbox (`_local_sandbox.py`) is a host folder `<root>/<server>.<pid>/<id>/` holding `work/` and
`tmp/` (private tmpfs mounts of `disk_mb` each when we are root), plus optionally a cgroup and a host uid
of its own; each backend defines the `command()` that runs an argv in it. The folder name carries the
server's pid and start time, so `reap()` can tell a crashed server's leftovers from a live one's.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from gym_server.core.errors import SandboxUnavailable
from gym_server.sandbox import _hostfs
from gym_server.sandbox._host import orphan_reaper, start_time, unmount_below
from gym_server.sandbox._local_sandbox import LocalSandbox
from gym_server.sandbox.cgroups import CgroupManager, SandboxCgroup
from gym_server.sandbox.protocol import WORKDIR, Limits

__all__ = ["BASE_ENV", "LocalBackendBase", "LocalSandbox"]

BASE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": WORKDIR,
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
}


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
            # Returns as soon as every init is collected; the bound is for a host too loaded to run them.
            await asyncio.to_thread(orphan_reaper().reap, 10.0)
        self._prepared = False
