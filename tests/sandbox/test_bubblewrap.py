"""What only the local backends do: namespaces, per-sandbox uid and cgroup, reaping, the unsafe runner."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from gymtest import apoll

from gym_server.core.errors import SandboxUnavailable
from gym_server.sandbox._host import orphan_reaper, own_children, process_statuses
from gym_server.sandbox.bubblewrap import BubblewrapBackend
from gym_server.sandbox.protocol import Limits
from gym_server.sandbox.unsafe import UnsafeBackend

pytestmark = pytest.mark.bwrap


async def test_namespaces_uid_and_limits(bwrap_backend: BubblewrapBackend) -> None:
    box = await bwrap_backend.start(Limits(memory_mb=128, pids=20, timeout_s=5))
    try:
        result = await box.exec("hostname; cat /proc/self/uid_map; ls /proc | grep -c '^[0-9]'; ulimit -c")
        lines = result.text().splitlines()
        assert lines[0] == "sandbox"
        assert lines[1].split()[0] == "65534"  # only the sandbox user exists in its user namespace
        assert int(lines[2]) <= 4  # its own processes only (init, shell, ls, grep)
        assert lines[3] == "0"  # no core dumps
        if bwrap_backend.is_root:
            assert box.uid is not None and box.uid >= BubblewrapBackend.UID_BASE
    finally:
        await box.close()


async def test_cgroup_limits_when_root(bwrap_backend: BubblewrapBackend) -> None:
    box = await bwrap_backend.start(Limits(memory_mb=96, pids=12, cpus=0.5, timeout_s=5))
    try:
        if box.cgroup is None:
            pytest.skip("no writable cgroup hierarchy here; rlimits only")
        memory = box.cgroup.dirs.get("memory") or box.cgroup.dirs[""]
        limit_file = "memory.limit_in_bytes" if box.cgroup.version == 1 else "memory.max"
        assert int((memory / limit_file).read_text()) == 96 * 1024 * 1024
        spawn = "import threading, time\nfor _ in range(30):\n"
        spawn += "    threading.Thread(target=time.sleep, args=(1,)).start()"
        threads = await box.exec(["python3", "-c", spawn])
        assert threads.exit_code != 0 and b"can't start new thread" in threads.stderr
    finally:
        await box.close()


def _dead_server(server_name: str) -> Path:
    """Run a server process that starts a sandbox and dies without closing it; returns its folder."""
    code = (
        "import asyncio, os\n"
        "from gym_server.sandbox.bubblewrap import BubblewrapBackend\n"
        "async def main():\n"
        f"    backend = BubblewrapBackend(server_name={server_name!r})\n"
        "    await backend.start()\n"
        "    print(backend.instance_dir, flush=True)\n"
        "    os._exit(0)\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    folder = Path(done.stdout.strip())
    assert folder.is_dir()
    return folder


def _traces(folder: Path) -> list[str]:
    found = [str(folder)] if folder.exists() else []
    found += [line for line in Path("/proc/self/mounts").read_text().splitlines() if str(folder) in line]
    cgroups = Path("/sys/fs/cgroup/pids/gym-sandbox")
    if cgroups.is_dir():
        found += [p.name for p in cgroups.iterdir() if p.name.startswith(folder.name)]
    return found


async def test_reap_removes_a_dead_servers_sandboxes(bwrap_backend: BubblewrapBackend) -> None:
    dead = await asyncio.to_thread(_dead_server, bwrap_backend.server_name)
    assert await bwrap_backend.reap() == 1
    assert await asyncio.to_thread(_traces, dead) == []


async def test_reap_spares_live_servers(bwrap_backend: BubblewrapBackend) -> None:
    other = BubblewrapBackend(server_name=bwrap_backend.server_name + "-other")
    box = await other.start()
    try:
        assert await bwrap_backend.reap() == 0
        assert (await box.exec("true")).ok
    finally:
        await other.aclose()


async def test_missing_bwrap_is_a_clear_503(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shutil.which", lambda *args, **kwargs: None)
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        await BubblewrapBackend(server_name="no-bwrap").check()


async def test_unsafe_backend_warns_loudly_and_still_limits(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    backend = UnsafeBackend(server_name="unsafe-test")
    box = await backend.start(Limits(timeout_s=2, output_bytes=10))
    try:
        assert any("unsafe-no-sandbox" in r.getMessage() for r in caplog.records)
        result = await box.exec("echo 0123456789abcdef; pwd", files={"f.txt": "x"})
        assert result.stdout_truncated and result.stdout == b"0123456789"
        timed = await box.exec("sleep 10")
        assert timed.timed_out and timed.duration_s < 9
        assert await box.get_file("f.txt") == b"x"
        env = await box.exec("env")
        assert b"GYM_" not in env.stdout
    finally:
        await backend.aclose()


def _children_of_ours() -> dict[int, str]:
    """Our child processes, pid -> state letter (Z: a zombie)."""
    return {pid: fields.get("State", "?").split()[0] for pid, fields in process_statuses(own_children())}


async def test_an_init_whose_pid_was_never_reported_is_collected() -> None:
    """A bwrap killed between creating its namespace's init and writing that init's pid to the status
    pipe (a sandbox closed the moment it started) orphaned the init to the server, which never collected
    it: a zombie for the server's lifetime (seen in CI, 2026-12-07). `unshare --fork --pid` stands in for
    such a bwrap, killed before anything was reported; a plain child of ours must be left alone."""
    reaper = orphan_reaper()
    if not reaper.enabled:
        pytest.skip("this kernel has no child subreapers")
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    outer = await asyncio.create_subprocess_exec("unshare", *user, "--pid", "--fork", "sleep", "0.3")
    plain = await asyncio.create_subprocess_exec("sleep", "30")
    try:
        await apoll(lambda: asyncio.to_thread(_children_of, outer.pid), bool, timeout_s=10)
        (init,) = _children_of(outer.pid)
        outer.kill()
        await outer.wait()
        # Orphaned to us, it exits and stays a zombie: nobody knows its pid.
        await apoll(
            lambda: asyncio.to_thread(_children_of_ours), lambda now: now.get(init) == "Z", timeout_s=10
        )
        reaper.adopt_unreported(os.getuid())
        await apoll(lambda: asyncio.to_thread(_children_of_ours), lambda now: init not in now, timeout_s=10)
    finally:
        plain.kill()
        assert await plain.wait() == -signal.SIGKILL  # its exit status was not taken by the reaper


def _children_of(pid: int) -> list[int]:
    return [int(c) for f in Path(f"/proc/{pid}/task").glob("*/children") for c in f.read_text().split()]
