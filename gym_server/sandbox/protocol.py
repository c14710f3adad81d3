"""The sandbox contract every backend implements, and the value types that cross it.

Environments and verifiers never talk to Docker or bubblewrap directly: they get a `Sandbox` from a
`SandboxBackend` (or borrow one from a `SandboxPool`), run commands in it with `exec`, move files with
`put_file`/`get_file`, and `close` it. Every limit has a locked-down default in `Limits`, so code that
forgets to ask for one still runs with no network, a memory cap, a pids cap, a CPU quota, a wall-clock
timeout and capped output. The result of a run is an `ExecResult` that says *why* a run ended (timeout,
out of memory, truncated output), because a trainer must not learn from a score the sandbox spoiled.

Exit codes follow the shell convention on every backend: 0..125 from the program, 128+N when signal N
killed it (137 for SIGKILL), so callers need not know which backend ran the code.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol, runtime_checkable

from gym_server.core.egress_policy import EgressPolicy
from gym_server.store.records import FailureClass

__all__ = [
    "DEFAULT_OUTPUT_BYTES",
    "SIGKILL_EXIT",
    "WORKDIR",
    "CappedBuffer",
    "Command",
    "ExecResult",
    "FileData",
    "Limits",
    "Sandbox",
    "SandboxBackend",
    "SpawnedProcess",
    "as_argv",
    "describe",
    "sandbox_path",
]

DEFAULT_OUTPUT_BYTES = 1024 * 1024
WORKDIR = "/work"
SIGKILL_EXIT = 128 + 9

Command = str | Sequence[str]
"""A command: an argv list, or a string run by `/bin/sh -c`."""

FileData = bytes | str


@dataclass(frozen=True, slots=True)
class Limits:
    """Resource limits of one sandbox; the defaults are the locked-down profile of the design brief.

    Attributes:
        memory_mb: memory of the whole sandbox, swap included (no swap beyond it).
        pids: processes and threads the sandbox may hold at once (a fork bomb stops here).
        cpus: CPU quota in cores.
        disk_mb: size of each writable tmpfs (the work dir and /tmp); nothing else is writable.
        timeout_s: default wall-clock limit of one `exec`; the whole process tree dies at the limit.
        output_bytes: bytes kept of stdout and of stderr each; the rest is counted and dropped.
        file_size_mb: largest file one process may write (RLIMIT_FSIZE).
        open_files: file descriptors per process (RLIMIT_NOFILE).
    """

    memory_mb: int = 256
    pids: int = 64
    cpus: float = 1.0
    disk_mb: int = 64
    timeout_s: float = 10.0
    output_bytes: int = DEFAULT_OUTPUT_BYTES
    file_size_mb: int = 64
    open_files: int = 256

    def __post_init__(self) -> None:
        for name in ("memory_mb", "pids", "disk_mb", "output_bytes", "file_size_mb", "open_files"):
            if getattr(self, name) < 1:
                raise ValueError(f"Limits.{name} must be at least 1")
        if self.cpus <= 0 or self.timeout_s <= 0:
            raise ValueError("Limits.cpus and Limits.timeout_s must be positive")

    def with_(self, **changes: float) -> Limits:
        """A copy with some limits changed: `limits.with_(timeout_s=2)`."""
        return replace(self, **changes)  # type: ignore[arg-type]


@dataclass(slots=True)
class ExecResult:
    """How one command ended inside a sandbox.

    `timed_out` and `oom_killed` are set by the backend from what it observed (its own deadline, the
    sandbox's OOM counter), never parsed from the program's output, so code cannot fake them away.
    """

    exit_code: int
    stdout: bytes = b""
    stderr: bytes = b""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    timed_out: bool = False
    oom_killed: bool = False
    duration_s: float = 0.0
    info: dict[str, object] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """The program exited 0 on its own, within its limits."""
        return self.exit_code == 0 and not self.timed_out and not self.oom_killed

    @property
    def truncated(self) -> bool:
        return self.stdout_truncated or self.stderr_truncated

    @property
    def status(self) -> str:
        """One word for logs and tool messages: ok, timeout, oom, killed (by a signal) or error."""
        if self.timed_out:
            return "timeout"
        if self.oom_killed:
            return "oom"
        if self.exit_code == 0:
            return "ok"
        return "killed" if self.exit_code > 128 else "error"

    @property
    def failure(self) -> FailureClass | None:
        """The trajectory failure class when the sandbox, not the program, ended the run."""
        if self.timed_out:
            return FailureClass.SANDBOX_TIMEOUT
        if self.oom_killed:
            return FailureClass.SANDBOX_OOM
        return None

    def text(self, stream: str = "stdout") -> str:
        """A stream decoded as UTF-8 with replacement, for messages to a model."""
        data = self.stdout if stream == "stdout" else self.stderr
        return data.decode("utf-8", "replace")

    def __repr__(self) -> str:
        flags = [
            name
            for name in ("timed_out", "oom_killed", "stdout_truncated", "stderr_truncated")
            if getattr(self, name)
        ]
        return (
            f"ExecResult(exit_code={self.exit_code}, status={self.status!r}, stdout={len(self.stdout)}B, "
            f"stderr={len(self.stderr)}B, duration_s={self.duration_s:.3f}, flags={flags})"
        )


class CappedBuffer:
    """Keeps the first `limit` bytes written to it and counts the rest, so a flood costs no memory."""

    __slots__ = ("_chunks", "_kept", "limit", "total")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.total = 0
        self._kept = 0
        self._chunks: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.total += len(data)
        room = self.limit - self._kept
        if room > 0 and data:
            piece = data[:room]
            self._chunks.append(piece)
            self._kept += len(piece)

    @property
    def truncated(self) -> bool:
        return self.total > self.limit

    def getvalue(self) -> bytes:
        return b"".join(self._chunks)


@runtime_checkable
class SpawnedProcess(Protocol):
    """A long-lived process in a sandbox (see `Sandbox.spawn`); stdin in, exact stdout reads out."""

    @property
    def alive(self) -> bool: ...

    async def write(self, data: bytes) -> None:
        """Send bytes to its stdin; EOFError once it has ended."""
        ...

    async def read(self, size: int, timeout: float) -> bytes:  # noqa: ASYNC109 - a per-request deadline
        """Exactly `size` bytes of its stdout; EOFError if it ends first, TimeoutError past `timeout`."""
        ...

    async def readline(self, limit: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        """One line of its stdout, newline included, for line protocols (MCP's stdio, JSON lines).

        EOFError if it ends first or the line outgrows `limit` bytes; TimeoutError past `timeout`.
        """
        ...

    async def kill(self) -> None:
        """Kill it and everything it started; idempotent."""
        ...


@runtime_checkable
class Sandbox(Protocol):
    """One isolated machine-like place to run code, alive until `close()`.

    Commands run one at a time (`exec` serializes), as the same unprivileged user, with the work dir
    (`/work`) as the current directory. Files written to the work dir or /tmp persist between commands
    of the same sandbox; processes do not: nothing a command started survives the end of its `exec`.
    """

    id: str
    limits: Limits

    @property
    def closed(self) -> bool: ...

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
        """Run `cmd` and wait for it; never raises for what the program does, only for a broken sandbox.

        Args:
            cmd: argv, or a string for `/bin/sh -c`.
            stdin: bytes fed to the program's standard input (empty input when None).
            env: extra environment variables; the host's environment never enters the sandbox.
            files: files written (relative to the work dir) before the command starts.
            timeout: wall-clock seconds, default `limits.timeout_s`.
            cwd: working directory inside the sandbox, default the work dir.

        Raises:
            SandboxUnavailable: the sandbox or its engine is gone.
        """
        ...

    async def put_file(self, path: str, data: FileData) -> None:
        """Write a file (relative paths are under the work dir); parent folders are created."""
        ...

    async def get_file(self, path: str, max_bytes: int | None = None) -> bytes:
        """Read a file back (at most `max_bytes`, default `limits.output_bytes`).

        Raises:
            FileNotFoundError: no regular file at `path` (symlinks are not followed).
        """
        ...

    async def spawn(
        self, cmd: Command, *, env: Mapping[str, str] | None = None, cwd: str | None = None
    ) -> SpawnedProcess:
        """Start a long-lived process (a REPL, a warm interpreter) and return a handle to its pipes.

        It keeps running between `exec` calls until killed or until the sandbox closes, under the
        sandbox's resource limits but with no wall-clock limit: the caller times its own requests.
        """
        ...

    async def scrub(self) -> bool:
        """Reset to a fresh state for another borrower (no processes, empty work dir and /tmp).

        Returns False when that is not possible; the caller must then close the sandbox.
        """
        ...

    async def close(self) -> None:
        """Kill everything inside and release the sandbox; idempotent."""
        ...


@runtime_checkable
class SandboxBackend(Protocol):
    """A way to make sandboxes: Docker, bubblewrap, or the unsafe local runner."""

    @property
    def name(self) -> str: ...

    async def start(
        self,
        limits: Limits | None = None,
        *,
        session_id: str | None = None,
        egress: EgressPolicy | None = None,
    ) -> Sandbox:
        """A new sandbox with `limits` (default `Limits()`), labelled with the session when given.

        With `egress`, the sandbox reaches exactly the policy's destinations through a filtering proxy
        of its own (see `gym_server.sandbox.egress`), closed with the sandbox; without it, nothing.

        Raises:
            SandboxUnavailable: the backend cannot make sandboxes right now (engine down, image missing).
        """
        ...

    async def check(self) -> None:
        """Raise `SandboxUnavailable` with a clear detail unless the backend can start sandboxes."""
        ...

    async def reap(self) -> int:
        """Remove what crashed servers left behind (containers, mounts); returns how many were removed."""
        ...

    async def aclose(self) -> None:
        """Close every sandbox this backend still holds."""
        ...


def as_argv(cmd: Command) -> list[str]:
    """The argv for a command: strings go through `/bin/sh -c`."""
    if isinstance(cmd, str):
        return ["/bin/sh", "-c", cmd]
    argv = [str(part) for part in cmd]
    if not argv:
        raise ValueError("empty command")
    return argv


def sandbox_path(path: str, workdir: str = WORKDIR) -> str:
    """The absolute in-sandbox path for a file argument, refusing paths that climb out with '..'."""
    absolute = path if path.startswith("/") else f"{workdir}/{path}"
    parts: list[str] = []
    for part in absolute.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            raise ValueError(f"path {path!r} must not contain '..'")
        parts.append(part)
    return "/" + "/".join(parts)


def describe(cmd: Command) -> str:
    """A short printable form of a command for logs."""
    text = cmd if isinstance(cmd, str) else shlex.join(as_argv(cmd))
    return text if len(text) <= 120 else text[:117] + "..."
