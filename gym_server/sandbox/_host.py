"""Host-level helpers of the local backends: private tmpfs mounts, orphan reaping, process identity.

These touch the host itself (mount tables, the process tree) rather than one sandbox, and need root
(mounts) or act process-wide (the child-subreaper flag), so they live apart from the sandbox logic.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

__all__ = ["mount_tmpfs", "orphan_reaper", "own_children", "process_statuses", "start_time", "unmount_below"]

_MS_NOSUID, _MS_NODEV, _MNT_DETACH = 2, 4, 2
_PR_SET_CHILD_SUBREAPER = 36
_POLL_S = 0.05  # how often an exited init is looked for where the kernel has no pidfds
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

    An init still running when it is reported is watched through a pidfd on the running loop and
    collected the moment it exits: checking only when the next sandbox reports its own init left the
    last one of a quiet spell a zombie for as long as the server stayed idle.
    """

    def __init__(self) -> None:
        self.enabled = _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
        self._pending: set[int] = set()

    def add(self, pid: int) -> None:
        """Collect `pid` (an init that is, or is about to become, our child) as soon as it exits."""
        if not self.enabled or pid in self._pending:
            return
        self._pending.add(pid)
        self.reap()
        if pid in self._pending:
            self._watch(pid, asyncio.get_running_loop())

    def adopt_unreported(self, uid: int | None) -> None:
        """Collect the bubblewrap inits orphaned to us whose pids were never reported (see the class).

        bubblewrap writes its init's pid to the status pipe just after creating it, so a bwrap killed in
        between (a sandbox closed, or a run cancelled, the moment it started) leaves an init no one
        collects. Such an init is found by what it is: a child of ours that is pid 1 of a pid namespace
        of its own (this server starts no such process directly), running as `uid` where the sandbox
        has a uid of its own. Only our own children are read (not all of /proc): a few files, on the loop.
        """
        if not self.enabled:
            return
        me = str(os.getpid())
        for pid, fields in process_statuses(own_children()):
            nspids = fields.get("NSpid", "").split()
            if fields.get("PPid", "").strip() != me or len(nspids) < 2 or nspids[-1] != "1":
                continue
            if uid is None or fields.get("Uid", "").split()[:1] == [str(uid)]:
                self.add(pid)

    def _watch(self, pid: int, loop: asyncio.AbstractEventLoop) -> None:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:  # gone already: collected meanwhile
            self._pending.discard(pid)
            return
        except OSError:  # a kernel without pidfds (before 5.3): look again shortly
            loop.call_later(_POLL_S, self._poll, pid, loop)
            return
        loop.add_reader(fd, self._exited, pid, fd, loop)

    def _exited(self, pid: int, fd: int, loop: asyncio.AbstractEventLoop) -> None:
        loop.remove_reader(fd)
        os.close(fd)
        self._collect(pid)

    def _poll(self, pid: int, loop: asyncio.AbstractEventLoop) -> None:
        if pid in self._pending and not self._collect(pid) and not loop.is_closed():
            loop.call_later(_POLL_S, self._poll, pid, loop)

    def _collect(self, pid: int) -> bool:
        """Wait for `pid` without blocking; True once it is collected (or was never ours to collect)."""
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # not ours (an init took it) or already collected
            done = pid
        if done:
            self._pending.discard(pid)
        return bool(done)

    def reap(self, wait_s: float = 0.0) -> int:
        """Collect the pending pids that have exited; wait up to `wait_s` for the rest."""
        deadline = time.monotonic() + wait_s
        while True:
            for pid in list(self._pending):
                self._collect(pid)
            if not self._pending or time.monotonic() >= deadline:
                return len(self._pending)
            time.sleep(0.005)


_orphans: _OrphanReaper | None = None


def orphan_reaper() -> _OrphanReaper:
    global _orphans
    if _orphans is None:
        _orphans = _OrphanReaper()
    return _orphans


def process_statuses(pids: Iterable[int] | None = None) -> Iterator[tuple[int, dict[str, str]]]:
    """Each host process's pid (or each of `pids`) and the fields of its /proc/PID/status (`Uid`, `PPid`,
    `NSpid`, ...); a process gone between the listing and the read is skipped."""
    for pid in (int(e) for e in os.listdir("/proc") if e.isdigit()) if pids is None else pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        yield pid, dict(line.split(":", 1) for line in status.splitlines() if ":" in line)


def own_children() -> list[int]:
    """This process's children, any thread's (an orphan goes to one thread of its subreaper)."""
    found: list[int] = []
    for listing in Path("/proc/self/task").glob("*/children"):
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            found += [int(pid) for pid in listing.read_text().split()]
    return found


def start_time(pid: int) -> str | None:
    """The kernel's start time of a process (to tell a live server from a reused pid), None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]
