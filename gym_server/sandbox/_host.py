"""Host-level helpers of the local backends: private tmpfs mounts, orphan reaping, process identity.

These touch the host itself (mount tables, the process tree) rather than one sandbox, and need root
(mounts) or act process-wide (the child-subreaper flag), so they live apart from the sandbox logic.
"""

from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path

__all__ = ["mount_tmpfs", "orphan_reaper", "start_time", "unmount_below"]

_MS_NOSUID, _MS_NODEV, _MNT_DETACH = 2, 4, 2
_PR_SET_CHILD_SUBREAPER = 36
_libc = ctypes.CDLL(None, use_errno=True)


def mount_tmpfs(target: Path, size: int, uid: int) -> None:
    """Mount a private tmpfs of `size` bytes owned by `uid` on `target` (root only)."""
    options = f"size={size},mode=0700,uid={uid},gid={uid}".encode()
    if _libc.mount(b"tmpfs", str(target).encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, options) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno), str(target))


def unmount_below(folder: Path) -> None:
    """Detach every mount at or below `folder` (deepest first)."""
    prefix = str(folder).rstrip("/") + "/"
    points = [
        line.split()[1]
        for line in Path("/proc/self/mounts").read_text().splitlines()
        if (line.split()[1] + "/").startswith(prefix)
    ]
    for point in sorted(points, key=len, reverse=True):
        _libc.umount2(point.encode(), _MNT_DETACH)


class _OrphanReaper:
    """Reaps bubblewrap's in-namespace init processes, which outlive their parent by a moment.

    bwrap's outer process exits as soon as the sandboxed command has, and its namespace's init exits
    just after, orphaned. Orphans go to the nearest subreaper, and an init that reaps lazily (or a
    server running as pid 1 of a container without one) collects zombies. The server therefore becomes
    a child subreaper and waits for exactly the pids bubblewrap reported, and for no other process, so
    it never steals an exit status another component waits for.
    """

    def __init__(self) -> None:
        self.enabled = _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
        self._pending: set[int] = set()

    def add(self, pid: int) -> None:
        if self.enabled:
            self._pending.add(pid)
        self.reap()

    def reap(self, wait_s: float = 0.0) -> int:
        """Collect the pending pids that have exited; wait up to `wait_s` for the rest."""
        deadline = time.monotonic() + wait_s
        while True:
            for pid in list(self._pending):
                try:
                    done, _ = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:  # not ours (an init took it) or already collected
                    done = pid
                if done:
                    self._pending.discard(pid)
            if not self._pending or time.monotonic() >= deadline:
                return len(self._pending)
            time.sleep(0.005)


_orphans: _OrphanReaper | None = None


def orphan_reaper() -> _OrphanReaper:
    global _orphans
    if _orphans is None:
        _orphans = _OrphanReaper()
    return _orphans


def start_time(pid: int) -> str | None:
    """The kernel's start time of a process (to tell a live server from a reused pid), None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]
