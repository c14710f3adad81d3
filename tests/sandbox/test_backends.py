"""The sandbox contract, run identically on every backend that works here."""

from __future__ import annotations

import asyncio

import pytest

from gym_server.core.errors import SandboxUnavailable
from gym_server.sandbox.protocol import Limits, Sandbox, SandboxBackend


async def test_exit_code_stdout_stderr(sandbox: Sandbox) -> None:
    result = await sandbox.exec(
        ["python3", "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"]
    )
    assert (result.exit_code, result.stdout, result.stderr) == (3, b"out\n", b"err\n")
    assert result.status == "error" and not result.ok and result.failure is None
    assert result.duration_s > 0


async def test_shell_string_stdin_env_and_cwd(sandbox: Sandbox) -> None:
    result = await sandbox.exec(
        'read line; echo "$line $GREETING $(pwd)"', stdin="hello\n", env={"GREETING": "hi"}
    )
    assert result.ok and result.stdout == b"hello hi /work\n"
    nested = await sandbox.exec("pwd", cwd="/tmp")
    assert nested.stdout == b"/tmp\n"


async def test_large_stdin_reaches_the_program(sandbox: Sandbox) -> None:
    data = b"x" * 300_000
    result = await sandbox.exec(
        ["python3", "-c", "import sys; print(len(sys.stdin.buffer.read()))"], stdin=data
    )
    assert result.stdout == b"300000\n"


async def test_runs_as_unprivileged_user_without_capabilities(sandbox: Sandbox) -> None:
    result = await sandbox.exec("id -u; grep CapEff /proc/self/status; grep NoNewPrivs /proc/self/status")
    lines = result.text().splitlines()
    assert lines[0] == "65534"
    assert lines[1].split()[1] == "0000000000000000"


async def test_signal_exit_is_shell_style(sandbox: Sandbox) -> None:
    result = await sandbox.exec(["python3", "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    assert result.exit_code == 137 and not result.timed_out and not result.oom_killed
    assert result.status == "killed"


async def test_files_persist_between_execs_of_one_sandbox(sandbox: Sandbox) -> None:
    await sandbox.exec("echo 1 > counter.txt && mkdir -p sub && echo deep > sub/f && echo t > /tmp/t")
    result = await sandbox.exec("cat counter.txt sub/f /tmp/t")
    assert result.stdout == b"1\ndeep\nt\n"


async def test_put_get_files_and_exec_files(sandbox: Sandbox) -> None:
    await sandbox.put_file("data/in.txt", "abc")
    await sandbox.put_file("/tmp/bin.dat", bytes(range(256)))
    assert await sandbox.get_file("/work/data/in.txt") == b"abc"
    assert await sandbox.get_file("/tmp/bin.dat") == bytes(range(256))
    assert await sandbox.get_file("data/in.txt", max_bytes=2) == b"ab"
    result = await sandbox.exec("cat main.py | wc -c; python3 main.py", files={"main.py": "print(6 * 7)"})
    assert result.stdout.split() == [b"12", b"42"]
    with pytest.raises(FileNotFoundError):
        await sandbox.get_file("missing.txt")
    with pytest.raises(ValueError, match=r"\.\."):
        await sandbox.put_file("../etc/passwd", "x")


async def test_put_file_outside_writable_folders_fails(sandbox: Sandbox) -> None:
    with pytest.raises(PermissionError):
        await sandbox.put_file("/usr/evil", "x")


async def test_symlink_is_never_followed_by_get_file(sandbox: Sandbox) -> None:
    await sandbox.exec("ln -s /etc/passwd link && ln -s /proc/self/environ env")
    for name in ("link", "env"):
        with pytest.raises(OSError):
            await sandbox.get_file(name)


async def test_execs_on_one_sandbox_are_serialized(sandbox: Sandbox) -> None:
    script = "echo start >> log; sleep 0.2; echo end >> log"
    await asyncio.gather(*(sandbox.exec(script) for _ in range(3)))
    log = (await sandbox.get_file("log")).decode().split()
    assert log == ["start", "end"] * 3


async def test_scrub_empties_the_sandbox(sandbox: Sandbox) -> None:
    await sandbox.exec("echo x > a; mkdir d; echo y > d/b; echo z > /tmp/c")
    assert await sandbox.scrub()
    result = await sandbox.exec("ls -A /work /tmp")
    assert result.stdout.split() == [b"/tmp:", b"/work:"]


async def test_close_is_idempotent_and_final(backend: SandboxBackend) -> None:
    box = await backend.start(Limits(timeout_s=5))
    await box.exec("true")
    await box.close()
    await box.close()
    assert box.closed
    with pytest.raises(SandboxUnavailable):
        await box.exec("true")


async def test_sandboxes_are_isolated_from_each_other(backend: SandboxBackend) -> None:
    first, second = await backend.start(Limits(timeout_s=5)), await backend.start(Limits(timeout_s=5))
    try:
        await first.put_file("secret.txt", "first")
        result = await second.exec("cat secret.txt")
        assert result.exit_code != 0 and b"first" not in result.stdout
    finally:
        await first.close()
        await second.close()


async def test_concurrent_sandboxes_run_in_parallel(backend: SandboxBackend) -> None:
    boxes = await asyncio.gather(*(backend.start(Limits(timeout_s=10)) for _ in range(4)))
    try:
        results = await asyncio.gather(*(box.exec(["python3", "-c", "print(2 + 2)"]) for box in boxes))
        assert [r.stdout for r in results] == [b"4\n"] * 4
    finally:
        for box in boxes:
            await box.close()


ECHO = "import sys\nfor line in sys.stdin:\n    print(eval(line), flush=True)\n"


async def test_spawned_process_keeps_state_and_survives_execs(sandbox: Sandbox) -> None:
    process = await sandbox.spawn(["python3", "-u", "-c", ECHO])
    try:
        for value in (1, 21):
            await process.write(f"{value} * 2\n".encode())
            assert await process.read(len(str(value * 2)) + 1, 5) == f"{value * 2}\n".encode()
        assert (await sandbox.exec("echo side")).stdout == b"side\n"
        await process.write(b"'still here'\n")
        assert await process.read(len("still here") + 1, 5) == b"still here\n"
        with pytest.raises(TimeoutError):
            await process.read(1, 0.2)  # nothing more to read
        await process.write(b"__import__('os')._exit(0)\n")
        with pytest.raises(EOFError):
            await process.read(1, 5)
        assert not process.alive
    finally:
        await process.kill()


async def test_close_kills_spawned_processes(backend: SandboxBackend) -> None:
    box = await backend.start(Limits(timeout_s=5))
    process = await box.spawn(["sleep", "600"])
    assert process.alive
    await box.close()
    assert not process.alive


LINES = (
    "import sys, time\n"
    "sys.stdout.write('one\\ntw'); sys.stdout.flush(); time.sleep(0.2)\n"
    "print('o\\n' + 'x' * 100)\n"
)


async def test_spawned_process_reads_lines(sandbox: Sandbox) -> None:
    process = await sandbox.spawn(["python3", "-u", "-c", LINES])
    try:
        assert await process.readline(64, 5) == b"one\n"
        assert await process.readline(64, 5) == b"two\n"  # a line split across writes
        with pytest.raises(EOFError, match="longer than 64"):
            await process.readline(64, 5)
    finally:
        await process.kill()
    quiet = await sandbox.spawn(["python3", "-c", "import sys; sys.stdin.read()"])
    try:
        with pytest.raises(TimeoutError):
            await quiet.readline(64, 0.2)
        await quiet.write(b"")
    finally:
        await quiet.kill()
    ended = await sandbox.spawn(["python3", "-c", "print('last', end='')"])
    try:
        with pytest.raises(EOFError, match="ended"):
            await ended.readline(64, 5)
    finally:
        await ended.kill()
