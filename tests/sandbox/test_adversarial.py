"""Hostile programs, on every backend: each is classified, the host is unharmed, nothing is left behind.

The `backend` fixture (conftest) asserts after each test that no process, container, mount, cgroup or
folder of the backend remains. Network tests only ever target 127.0.0.1; the sandboxes have no other
interface to target.
"""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import pytest

from gym_server.sandbox.protocol import Limits, Sandbox, SandboxBackend

# Deadlines are generous: this suite also runs on loaded CI machines; what it checks is the outcome.
TIGHT = Limits(timeout_s=10.0, memory_mb=128, pids=32, disk_mb=16, output_bytes=64 * 1024)


LIST_OTHERS = r"""me=$$; parent=$PPID; grand=$(cut -d' ' -f4 /proc/$PPID/stat)
for p in /proc/[0-9]*; do
  n=${p#/proc/}
  case $n in 1|$me|$parent|$grand) continue;; esac
  c=$(tr '\0' ' ' < $p/cmdline 2>/dev/null)
  [ "$c" = "sleep infinity " ] && continue
  [ -n "$c" ] && echo "$n $c"
done; true"""


def _exists(path: str) -> bool:
    return Path(path).exists()


async def _alive_after(sandbox: Sandbox) -> None:
    """The sandbox still works, and no process of an earlier run is alive in it."""
    listing = await sandbox.exec(LIST_OTHERS)
    assert listing.ok, listing
    assert listing.stdout == b"", listing.text()


async def test_infinite_loop_times_out(backend: SandboxBackend) -> None:
    box = await backend.start(TIGHT)
    try:
        result = await box.exec(["python3", "-c", "while True: pass"], timeout=1.5)
        assert result.timed_out and result.status == "timeout" and result.exit_code == 137
        assert result.failure is not None and result.failure.value == "sandbox_timeout"
        assert 1.4 < result.duration_s < 15
        await _alive_after(box)
    finally:
        await box.close()


async def test_sleeping_program_times_out(backend: SandboxBackend) -> None:
    box = await backend.start(TIGHT)
    try:
        result = await box.exec("sleep 60", timeout=1)
        assert result.timed_out and result.duration_s < 15
    finally:
        await box.close()


async def test_fork_bomb_is_contained(backend: SandboxBackend) -> None:
    box = await backend.start(TIGHT)
    try:
        bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
        result = await box.exec(["python3", "-c", bomb], timeout=2)
        assert result.timed_out
        assert os.fork is not None and (await asyncio.create_subprocess_exec("true")).pid > 0  # host can fork
        await _alive_after(box)
    finally:
        await box.close()


async def test_memory_bomb_is_oom_killed(backend: SandboxBackend) -> None:
    box = await backend.start(TIGHT)
    try:
        bomb = "blocks = []\nwhile True:\n    blocks.append(bytearray(8 << 20))"
        result = await box.exec(["python3", "-c", bomb], timeout=30)  # the OOM comes long before
        assert result.oom_killed and result.status == "oom" and not result.timed_out
        assert result.failure is not None and result.failure.value == "sandbox_oom"
        await _alive_after(box)
    finally:
        await box.close()


async def test_huge_output_is_truncated(backend: SandboxBackend) -> None:
    box = await backend.start(TIGHT)
    try:
        code = (
            "import sys\nchunk = b'x' * (1 << 20)\nfor _ in range(100):\n    sys.stdout.buffer.write(chunk)\n"
        )
        result = await box.exec(["python3", "-c", code], timeout=20)
        assert result.stdout_truncated and len(result.stdout) == TIGHT.output_bytes
        assert result.exit_code == 0 and not result.stderr_truncated
        assert result.info["stdout_bytes"] == 100 << 20
    finally:
        await box.close()


async def test_disk_fill_stops_at_the_tmpfs_size(backend: SandboxBackend) -> None:
    box = await backend.start(TIGHT)
    try:
        for folder in ("/work", "/tmp"):
            result = await box.exec(f"dd if=/dev/zero of={folder}/fill bs=1M count=200; du -sm {folder}/fill")
            assert result.exit_code != 0 or b"No space" in result.stderr
            used_mb = int(result.stdout.split()[-2]) if result.stdout else 0
            assert used_mb <= TIGHT.disk_mb
        shm = await box.exec("dd if=/dev/zero of=/dev/shm/fill bs=1M count=200")
        assert b"No space" in shm.stderr or b"File too large" in shm.stderr
    finally:
        await box.close()


async def test_network_is_unreachable(backend: SandboxBackend) -> None:
    hits: list[bytes] = []

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hits.append(await reader.read(100))
        writer.close()

    server = await asyncio.start_server(record, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    box = await backend.start(TIGHT)
    try:
        probe = (
            "import socket, sys\n"
            "s = socket.socket(); s.settimeout(2)\n"
            f"try:\n    s.connect(('127.0.0.1', {port})); s.sendall(b'escaped'); print('CONNECTED')\n"
            "except OSError as e:\n    print('refused', type(e).__name__)\n"
            "print(open('/proc/net/route').read().count('\\n'))\n"
            "print(sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]))\n"
        )
        result = await box.exec(["python3", "-c", probe])
        lines = result.text().splitlines()
        assert lines[0].startswith("refused"), lines
        assert lines[1] == "1"  # the routing table holds its header and no route
        assert lines[2] == "['lo']"
        await asyncio.sleep(0.1)
        assert hits == []
    finally:
        await box.close()
        server.close()
        await server.wait_closed()


async def test_host_secrets_are_out_of_reach(
    backend: SandboxBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "gym-host-secret-6f1d2"
    monkeypatch.setenv("GYM_TEST_HOST_SECRET", secret)
    box = await backend.start(TIGHT)
    try:
        result = await box.exec(
            "cat /etc/shadow; env; cat /proc/*/environ 2>/dev/null; cat /proc/1/cmdline; ls /root /home 2>&1"
        )
        assert secret.encode() not in result.stdout + result.stderr
        assert b"root:" not in result.stdout or b"root:x:" in result.stdout  # never a shadow hash line
        assert b":$" not in result.stdout
        docker_socket = await box.exec("test -e /var/run/docker.sock && echo present")
        assert b"present" not in docker_socket.stdout
    finally:
        await box.close()


async def test_writes_outside_the_work_dir_fail(backend: SandboxBackend, tmp_path: Path) -> None:
    box = await backend.start(TIGHT)
    try:
        for target in ("/usr/evil", "/etc/evil", "/evil", "/bin/evil", "/proc/evil"):
            result = await box.exec(f"echo owned > {target}")
            assert result.exit_code != 0, target
            assert not _exists(target)
        escape = await box.exec("echo owned > ../evil; ln -s / root; echo owned > root/evil2")
        assert escape.exit_code != 0
        assert not _exists("/evil2")
    finally:
        await box.close()


async def test_background_process_does_not_outlive_its_run(backend: SandboxBackend) -> None:
    box = await backend.start(TIGHT)
    try:
        script = (
            "setsid sh -c 'sleep 30; echo late > /work/late' & nohup sleep 40 >/dev/null 2>&1 & echo started"
        )
        result = await box.exec(script)
        assert (
            result.ok and result.stdout == b"started\n" and result.duration_s < 15
        )  # not the 30-60 s of its children
        await _alive_after(box)
        assert (await box.exec("test -e /work/late")).exit_code != 0
    finally:
        await box.close()


async def test_background_process_holding_stdout_cannot_stall_the_run(backend: SandboxBackend) -> None:
    box = await backend.start(TIGHT)
    try:
        result = await box.exec("(sleep 30; echo late) & echo now")
        assert result.stdout == b"now\n" and result.duration_s < 15  # not the 30 s of the sleep
    finally:
        await box.close()


async def test_killing_the_wrapper_does_not_leak(backend: SandboxBackend) -> None:
    box = await backend.start(TIGHT)
    try:
        result = await box.exec("sleep 30 & kill -9 $PPID; kill -9 1; sleep 30", timeout=2)
        assert result.exit_code != 0 or result.timed_out
        await _alive_after(box)
    finally:
        await box.close()


async def test_zombies_are_reaped(backend: SandboxBackend) -> None:
    box = await backend.start(TIGHT)
    try:
        code = "import os, time\nfor _ in range(10):\n    if os.fork() == 0:\n        os._exit(0)\n"
        code += "time.sleep(0.3)\n"
        result = await box.exec(["python3", "-c", code])
        assert result.ok
        states = await box.exec("cat /proc/[0-9]*/stat 2>/dev/null | awk '{print $3}' | sort | uniq -c")
        assert b" Z" not in states.stdout
        await _alive_after(box)
    finally:
        await box.close()


async def test_host_loopback_port_of_the_gym_is_unreachable(backend: SandboxBackend) -> None:
    """The gym's own HTTP port on the host's loopback cannot be reached from a sandbox."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    port = listener.getsockname()[1]
    box = await backend.start(TIGHT)
    try:
        url = f"http://127.0.0.1:{port}/healthz"
        result = await box.exec(
            ["python3", "-c", f"import urllib.request as u; u.urlopen({url!r}, timeout=2)"]
        )
        assert result.exit_code != 0
        assert b"Connection refused" in result.stderr or b"Network is unreachable" in result.stderr
    finally:
        await box.close()
        listener.close()


async def test_killing_the_exec_wrapper_itself_is_ended_from_outside(backend: SandboxBackend) -> None:
    box = await backend.start(TIGHT)
    try:
        script = "sleep 30 & for p in $PPID $(cut -d' ' -f4 /proc/$PPID/stat); do kill -9 $p; done; sleep 30"
        result = await box.exec(script, timeout=1.5)
        assert result.exit_code == 137 or result.timed_out
        assert result.duration_s < 20
        await _alive_after(box)
    finally:
        await box.close()
