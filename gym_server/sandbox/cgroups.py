"""Per-sandbox control groups for the local backend: one memory, pids and CPU budget per sandbox.

Resource limits (rlimits) are per process, and RLIMIT_NPROC counts every process of a host user, so on
their own they cannot bound a whole sandbox. When the server may write to the cgroup filesystem (it runs
as root, or was delegated a subtree), each sandbox gets its own group under `<our group>/gym-sandbox/`:
memory without swap, a pids limit, a CPU quota, an OOM-kill counter that tells an OOM apart from any other
SIGKILL, and a way to kill every process in the sandbox at once. Both the legacy (v1, one hierarchy per
controller) and the unified (v2) layouts are handled; anything unexpected means no cgroups, and the
caller falls back to rlimits.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CgroupManager", "SandboxCgroup", "own_limits"]

log = logging.getLogger(__name__)

_CONTROLLERS = ("memory", "pids", "cpu")
_CFS_PERIOD_US = 100_000


def _own_paths() -> dict[str, str]:
    """Our cgroup path per v1 controller (key '' for the unified hierarchy), from /proc/self/cgroup."""
    paths: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    return paths


def _mounts() -> dict[str, Path]:
    """Mount point per v1 controller, and '' for a cgroup2 mount."""
    found: dict[str, Path] = {}
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, point, fstype, options, *_ = line.split()
        if fstype == "cgroup2":
            found.setdefault("", Path(point))
        elif fstype == "cgroup":
            for option in options.split(","):
                if option in _CONTROLLERS:
                    found[option] = Path(point)
    return found


def _read_limit(path: Path) -> float | None:
    """A limit file's value, None when it says unlimited ("max", -1, or v1's near-2**63) or is absent."""
    try:
        text = path.read_text().split()
    except OSError:
        return None
    if not text or text[0] in ("max", "-1"):
        return None
    value = float(text[0])
    if path.name == "cpu.max" and len(text) > 1:
        value /= float(text[1])  # quota over period: cores
    return value if value < 2**62 else None


def own_limits() -> tuple[float | None, int | None]:
    """The CPU quota (cores) and memory limit (bytes) on the server's own cgroup and its ancestors.

    The tightest limit on the way up wins; None where nothing is set or the layout is unknown. A server
    in a container sees the container's limits here, which the host's core count and memory do not show.
    """
    try:
        mounts, own = _mounts(), _own_paths()
    except (OSError, ValueError):
        return None, None
    files = {"cpu": [("cpu", "cpu.cfs_quota_us")], "memory": [("memory", "memory.limit_in_bytes")]}
    if "" in mounts and "" in own:
        files["cpu"].append(("", "cpu.max"))
        files["memory"].append(("", "memory.max"))
    found: dict[str, float] = {}
    for kind, places in files.items():
        for controller, name in places:
            if controller not in mounts:
                continue
            folder = mounts[controller] / own.get(controller, "/").lstrip("/")
            while True:
                value = _read_limit(folder / name)
                if value is not None and kind == "cpu" and name == "cpu.cfs_quota_us":
                    period = _read_limit(folder / "cpu.cfs_period_us")
                    value = value / period if period else None
                if value is not None:
                    found[kind] = min(found.get(kind, value), value)
                if folder == mounts[controller] or folder.parent == folder:
                    break
                folder = folder.parent
    memory = found.get("memory")
    return found.get("cpu"), None if memory is None else int(memory)


def _write(path: Path, value: str) -> None:
    path.write_text(value)


@dataclass
class SandboxCgroup:
    """The group(s) of one sandbox: what to join, how to read its OOM kills, how to empty and remove it."""

    dirs: dict[str, Path]  # controller ('' for v2) -> group folder
    version: int
    _removed: bool = field(default=False, repr=False)

    @property
    def procs_files(self) -> list[Path]:
        """The `cgroup.procs` files a process writes its pid into to join every controller."""
        return [folder / "cgroup.procs" for folder in dict.fromkeys(self.dirs.values())]

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer has killed in this group so far."""
        folder = self.dirs.get("" if self.version == 2 else "memory")
        if folder is None:
            return 0
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            for line in (folder / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except OSError:
            pass
        return 0

    def pids(self) -> list[int]:
        found: set[int] = set()
        for procs in self.procs_files:
            with contextlib.suppress(OSError, ValueError):
                found.update(int(pid) for pid in procs.read_text().split())
        return sorted(found)

    def kill_all(self) -> None:
        """SIGKILL every process in the group (a fork bomb included: repeat until it is empty)."""
        if self.version == 2:
            with contextlib.suppress(OSError):
                _write(self.dirs[""] / "cgroup.kill", "1")
            return
        for _ in range(50):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.002)

    def remove(self) -> None:
        """Kill what is left and delete the group; retried briefly while dying processes leave it."""
        if self._removed:
            return
        self.kill_all()
        for folder in dict.fromkeys(self.dirs.values()):
            for _ in range(100):
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)
            else:
                log.warning("cgroup %s could not be removed; the reaper will retry", folder)
        self._removed = True


class CgroupManager:
    """Creates sandbox groups under one parent per controller; `detect()` returns None when it cannot."""

    PARENT = "gym-sandbox"

    def __init__(self, parents: dict[str, Path], version: int) -> None:
        self.parents = parents
        self.version = version

    def __repr__(self) -> str:
        return f"CgroupManager(v{self.version}, {sorted(self.parents)})"

    @classmethod
    def detect(cls) -> CgroupManager | None:
        """A manager when memory and pids groups can be created here, else None (rlimits only)."""
        try:
            mounts, own = _mounts(), _own_paths()
            if "memory" in mounts and "pids" in mounts:
                return cls._setup_v1(mounts, own)
            if "" in mounts and "" in own:
                return cls._setup_v2(mounts[""], own[""])
        except OSError as exc:
            log.info("cgroups unavailable for sandboxes (%s); using rlimits only", exc)
        return None

    @classmethod
    def _setup_v1(cls, mounts: dict[str, Path], own: dict[str, str]) -> CgroupManager | None:
        parents: dict[str, Path] = {}
        for controller in _CONTROLLERS:
            if controller not in mounts:
                continue
            parent = mounts[controller] / own.get(controller, "/").lstrip("/") / cls.PARENT
            parent.mkdir(exist_ok=True)
            if not os.access(parent / "cgroup.procs", os.W_OK):
                return None
            parents[controller] = parent
        return cls(parents, 1)

    @classmethod
    def _setup_v2(cls, mount: Path, own: str) -> CgroupManager | None:
        base = mount / own.lstrip("/")
        available = set((base / "cgroup.controllers").read_text().split())
        if not {"memory", "pids"} <= available:
            return None
        wanted = [c for c in _CONTROLLERS if c in available]
        # Enabling controllers for children fails while `base` itself holds processes (unless it is the
        # root); then we cannot use cgroups without moving the server, which we do not do behind its back.
        _write(base / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))
        parent = base / cls.PARENT
        parent.mkdir(exist_ok=True)
        _write(parent / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))
        return cls({"": parent}, 2)

    def create(self, name: str, *, memory_bytes: int, pids: int, cpus: float) -> SandboxCgroup:
        """A new group for one sandbox with its limits written; OSError if the kernel refuses."""
        dirs = {controller: parent / name for controller, parent in self.parents.items()}
        group = SandboxCgroup(dirs, self.version)
        try:
            for folder in dict.fromkeys(dirs.values()):
                folder.mkdir()
            if self.version == 2:
                folder = dirs[""]
                _write(folder / "memory.max", str(memory_bytes))
                with contextlib.suppress(OSError):
                    _write(folder / "memory.swap.max", "0")
                _write(folder / "pids.max", str(pids))
                with contextlib.suppress(OSError):
                    _write(folder / "cpu.max", f"{int(cpus * _CFS_PERIOD_US)} {_CFS_PERIOD_US}")
            else:
                _write(dirs["memory"] / "memory.limit_in_bytes", str(memory_bytes))
                with contextlib.suppress(OSError):  # absent without swap accounting; then there is no swap
                    _write(dirs["memory"] / "memory.memsw.limit_in_bytes", str(memory_bytes))
                _write(dirs["pids"] / "pids.max", str(pids))
                if "cpu" in dirs:
                    with contextlib.suppress(OSError):
                        _write(dirs["cpu"] / "cpu.cfs_period_us", str(_CFS_PERIOD_US))
                        _write(dirs["cpu"] / "cpu.cfs_quota_us", str(int(cpus * _CFS_PERIOD_US)))
        except OSError:
            group.remove()
            raise
        return group

    def reap(self, prefix: str, keep: set[str] | None = None) -> int:
        """Remove groups whose name starts with `prefix` and is not in `keep`; returns how many."""
        keep = keep or set()
        names: set[str] = set()
        for parent in self.parents.values():
            with contextlib.suppress(OSError):
                names.update(p.name for p in parent.iterdir() if p.is_dir() and p.name.startswith(prefix))
        for name in names - keep:
            SandboxCgroup({c: p / name for c, p in self.parents.items()}, self.version).remove()
        return len(names - keep)
