"""The local backend: every command runs in a fresh bubblewrap sandbox, for machines without Docker.

Each `exec` starts `bwrap` with every namespace unshared (no network: the sandbox's only interface is
its own loopback), a read-only view of the system's /usr (or of an image rootfs), a read-only root, a
private /proc, /dev and a size-limited /dev/shm, and the sandbox's own work dir and /tmp. The program
runs as uid 65534 inside, in a new session, with no capabilities and a clean environment. When the
command ends or its deadline passes, the pid namespace dies with it, so no background process or zombie
outlives an `exec`; files in the work dir and /tmp persist until `close()`.

Limits: as root, each sandbox gets its own host uid (so RLIMIT_NPROC and signals are per sandbox),
its own tmpfs mounts of `disk_mb` for the work dir and /tmp, and its own cgroup (memory without swap,
pids, CPU quota, OOM counter) when the cgroup filesystem is writable; rlimits (file size, CPU seconds,
open files, core dumps off) always apply. Without root there are no private mounts or uids: disk use is
bounded per file only, and memory per process (RLIMIT_AS), which is the documented weaker mode.
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import shlex
import shutil
import threading
from collections.abc import Mapping
from pathlib import Path

from gym_server.core.egress_policy import EgressPolicy
from gym_server.core.errors import SandboxUnavailable
from gym_server.sandbox._host import mount_tmpfs
from gym_server.sandbox._local import LocalBackendBase, LocalSandbox
from gym_server.sandbox.egress import mount as egress_mount
from gym_server.sandbox.egress.proxy import EgressProxy
from gym_server.sandbox.protocol import WORKDIR, Limits
from gym_server.sandbox.toolbox import bwrap_options

__all__ = ["BubblewrapBackend"]

log = logging.getLogger(__name__)

SANDBOX_UID = 65534
_SYSTEM_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime")
_PASSWD = "root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:65534:65534:sandbox:/work:/bin/sh\n"
_GROUP = "root:x:0:\nsandbox:x:65534:\n"
_HOSTS = "127.0.0.1 localhost sandbox\n::1 localhost\n"


class BubblewrapBackend(LocalBackendBase):
    """Sandboxes made of bubblewrap namespaces on this host.

    Args:
        root_dir: host folder for sandbox files (default `$TMPDIR/gym-sandbox`).
        server_name: names this server's sandboxes, so a restart can reap what a crash left.
        rootfs: an image's root folder to show instead of the host's /usr (e.g. the debootstrap tree).
        use_cgroups: put each sandbox in its own cgroup when the kernel lets us.
        tools_dir: a host folder shown read-only at `toolbox.TOOLS_MOUNT` (see `toolbox`).
    """

    name = "bubblewrap"

    def __init__(
        self,
        *,
        root_dir: Path | None = None,
        server_name: str = "gym",
        rootfs: Path | None = None,
        use_cgroups: bool = True,
        tools_dir: Path | None = None,
    ) -> None:
        super().__init__(root_dir=root_dir, server_name=server_name, use_cgroups=use_cgroups)
        self.rootfs = rootfs or Path("/")
        self.tools_dir = tools_dir
        self._tools: dict[str, str] = {}
        self._checked = False
        self._etc_lock = threading.Lock()
        self._etc_stamps: dict[str, tuple[int, int, int] | None] = {}

    def _tool(self, name: str) -> str:
        if name not in self._tools:
            found = shutil.which(name, path="/usr/bin:/bin:/usr/sbin:/sbin:/usr/local/bin")
            if found is None:
                raise SandboxUnavailable(
                    f"the bubblewrap backend needs `{name}`, which is not installed "
                    "(Debian: apt-get install bubblewrap util-linux)"
                )
            self._tools[name] = found
        return self._tools[name]

    async def check(self) -> None:
        """Start one throwaway sandbox; its failure (no bwrap, user namespaces off) becomes a clear 503."""
        if self._checked:
            return
        for name in ("bwrap", *(("setpriv",) if self.is_root else ())):
            self._tool(name)
        sandbox = await self._start(Limits(timeout_s=10), None)
        try:
            result = await sandbox.exec(["/bin/true"])
        finally:
            await sandbox.close()
        if result.exit_code != 0:
            raise SandboxUnavailable(f"bubblewrap cannot start a sandbox here: {result.text('stderr')[:500]}")
        self._checked = True
        await self.reap()  # what crashed servers on this host left behind

    async def start(
        self,
        limits: Limits | None = None,
        *,
        session_id: str | None = None,
        egress: EgressPolicy | None = None,
    ) -> LocalSandbox:
        await self.check()
        sandbox = await self._start(limits or Limits(), session_id)
        if egress is not None:
            try:
                sandbox.egress = EgressProxy(egress, session_id=session_id)
                await sandbox.egress.start()
            except BaseException:
                await sandbox.close()
                raise
        return sandbox

    def _prepare_instance(self) -> None:
        etc = self.instance_dir / "etc"
        etc.mkdir(mode=0o755, exist_ok=True)
        for name, text in (("passwd", _PASSWD), ("group", _GROUP), ("hosts", _HOSTS)):
            (etc / name).write_text(text)
            (etc / name).chmod(0o644)
        self._etc_stamps.clear()
        self._sync_etc()

    def _sync_etc(self) -> None:
        """Copy the few files of the system's /etc that a sandbox sees into the instance's own etc.

        Every exec binds that one folder read-only as /etc: one mount instead of one per file (about
        0.14 ms each with bwrap's remounts). Called at each sandbox start, so the copies follow the
        system's (an `ldconfig`, a new alternative) from the next sandbox on; a file edited in place
        inside `ld.so.conf.d` or `alternatives` is not noticed (their folders' times do not change).
        """
        with self._etc_lock:
            for name in _ETC_FILES:
                source = self.rootfs / "etc" / name
                try:
                    info = source.stat()
                    stamp: tuple[int, int, int] | None = (info.st_ino, info.st_mtime_ns, info.st_size)
                except OSError:
                    stamp = None
                if name in self._etc_stamps and self._etc_stamps[name] == stamp:
                    continue
                _replace(source if stamp else None, self.instance_dir / "etc" / name)
                self._etc_stamps[name] = stamp

    def _prepare_sandbox(self, folder: Path, limits: Limits, uid: int | None) -> None:
        self._sync_etc()
        size = limits.disk_mb * 1024 * 1024
        for name in ("work", "tmp"):
            (folder / name).mkdir(mode=0o700)
            if uid is not None:
                mount_tmpfs(folder / name, size, uid)

    def command(
        self,
        sandbox: LocalSandbox,
        argv: list[str],
        env: Mapping[str, str],
        cwd: str,
        timeout: float,
        status_fd: int,
    ) -> tuple[list[str], str]:
        """The host argv that runs `argv` in `sandbox`: one shell joins the cgroup and sets rlimits, then
        `setpriv` drops to the sandbox's uid and execs bwrap.

        The shell's `ulimit` builtin replaces a `prlimit` program per exec (about 0.6 ms). The uid switch
        stays a program: asking the fork to switch (`Popen(user=...)`) makes CPython fork instead of
        vfork, which costs more than `setpriv` does in a server of any size.
        """
        steps = (
            [f"echo $$ > {shlex.quote(str(p))}" for p in sandbox.cgroup.procs_files] if sandbox.cgroup else []
        )
        steps += [*self.rlimits(sandbox.limits, timeout, sandbox), 'exec "$@"']
        prefix = ["/bin/sh", "-c", " && ".join(steps), "gym-sandbox"]
        if sandbox.uid is not None:
            prefix += [
                self._tool("setpriv"),
                f"--reuid={sandbox.uid}",
                f"--regid={sandbox.uid}",
                "--clear-groups",
                "--",
            ]
        if sandbox.egress is not None:  # the command starts behind the in-sandbox forwarder
            argv, env = egress_mount.wrap_argv(argv), {**egress_mount.proxy_env(), **env}
        bwrap = [self._tool("bwrap"), *self._bwrap_options(sandbox, env, cwd, status_fd), "--", *argv]
        return [*prefix, *bwrap], "/"

    def _bwrap_options(
        self, sandbox: LocalSandbox, env: Mapping[str, str], cwd: str, status_fd: int
    ) -> list[str]:
        root, etc = self.rootfs, self.instance_dir / "etc"
        shm = str(min(sandbox.limits.disk_mb, 64) * 1024 * 1024)
        options = ["--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--clearenv"]
        options += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", "sandbox"]
        options += ["--ro-bind", str(root / "usr"), "/usr"]
        for name in _SYSTEM_DIRS:
            path = root / name
            if path.is_symlink():
                options += ["--symlink", os.readlink(path), f"/{name}"]
            elif path.is_dir():
                options += ["--ro-bind", str(path), f"/{name}"]
        options += ["--ro-bind", str(etc), "/etc", *bwrap_options(self.tools_dir)]
        options += egress_mount.bwrap_options(sandbox.egress.folder if sandbox.egress else None)
        options += [
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--size",
            shm,
            "--tmpfs",
            "/dev/shm",
            "--remount-ro",
            "/dev",
        ]
        options += [
            "--bind",
            str(sandbox.folder / "work"),
            WORKDIR,
            "--bind",
            str(sandbox.folder / "tmp"),
            "/tmp",
        ]
        options += ["--remount-ro", "/", "--chdir", cwd]
        if status_fd >= 0:
            options += ["--json-status-fd", str(status_fd)]
        for key, value in self.environment(env).items():
            options += ["--setenv", key, value]
        return options

    @staticmethod
    def rlimits(limits: Limits, timeout: float, sandbox: LocalSandbox) -> list[str]:
        """`ulimit` commands (soft and hard): what the cgroup cannot bound per process, and a fallback.

        `ulimit` counts file sizes in 512-byte blocks and address space in KiB; the process limit is
        `-u` in bash and `-p` in dash.
        """
        options = [
            f"ulimit -f {limits.file_size_mb * 1024 * 1024 // 512}",
            f"ulimit -n {limits.open_files}",
            f"ulimit -t {math.ceil(timeout * limits.cpus) + 1}",
            "ulimit -c 0",
        ]
        if sandbox.cgroup is None:
            options.append(f"ulimit -v {limits.memory_mb * 1024}")
            # RLIMIT_NPROC counts every process of the host uid: per sandbox only with a uid of its own.
            nproc = limits.pids if sandbox.uid is not None else limits.pids * 16
            options.append(f"{{ ulimit -u {nproc} 2>/dev/null || ulimit -p {nproc}; }}")
        return options

    def new_uid(self) -> int | None:
        """A host uid of its own for a sandbox when we may switch uids (root), else None."""
        if not self.is_root:
            return None
        while True:
            uid = self.UID_BASE + secrets.randbelow(self.UID_SPAN)
            if uid not in self._uids:
                self._uids.add(uid)
                return uid

    async def _start(self, limits: Limits, session_id: str | None) -> LocalSandbox:
        return await self.create_async(limits, session_id, self.new_uid())


def _replace(source: Path | None, target: Path) -> None:
    """Make `target` a copy of `source` (None: remove it): a file atomically, a folder by a quick swap."""
    staged = target.with_name(f".{target.name}.{secrets.token_hex(4)}")
    if source is not None:
        if source.is_dir():
            shutil.copytree(source, staged, symlinks=True)
        else:
            shutil.copy2(source, staged)  # follows a symlink, as a bind of the file did
    if target.is_dir() and not target.is_symlink():
        retired = target.with_name(f".{target.name}.{secrets.token_hex(4)}.old")
        target.rename(retired)
        shutil.rmtree(retired, ignore_errors=True)
    if source is None:
        target.unlink(missing_ok=True)
    else:
        staged.replace(target)
