"""The machine and the processes of the session benchmark: what it ran on, pinning, CPU and memory
readings from /proc, and child processes that are always stopped."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import platform
import re
import signal
import socket
import subprocess
from importlib import metadata
from pathlib import Path

HOST = "127.0.0.1"  # loopback only, always
REPO = Path(__file__).resolve().parent.parent
SERVER_CORE, LOADGEN_CORE = 0, 1


def _first_match(path: str, pattern: str) -> str | None:
    with contextlib.suppress(OSError):
        match = re.search(pattern, Path(path).read_text(), re.MULTILINE)
        if match:
            return match.group(1).strip()
    return None


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine_description() -> dict[str, str]:
    """Everything a reader needs to judge the numbers: CPU, cores, RAM, software versions, load, date."""
    mem_kb = _first_match("/proc/meminfo", r"^MemTotal:\s+(\d+)")
    git = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    return {
        "cpu": _first_match("/proc/cpuinfo", r"^model name\s*:\s*(.+)$") or platform.processor() or "?",
        "cores": str(os.cpu_count()),
        "ram": f"{int(mem_kb) / 1024 / 1024:.1f} GiB" if mem_kb else "?",
        "python": platform.python_version(),
        "kernel": f"{platform.system()} {platform.release()}",
        "packages": ", ".join(
            f"{name} {_version(name)}" for name in ("uvicorn", "uvloop", "httptools", "fastapi", "pydantic")
        ),
        "git": git or "?",
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load": " / ".join(load),
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def gym_env(port: int, database_url: str, max_sessions: int) -> dict[str, str]:
    """This process's environment plus the GYM_* settings every benchmarked gym server runs with.

    The catalog's warm-up is off: in the background it would import every environment on the server's
    pinned core during the first levels; the counter environment's own first use falls in the warm-up.
    """
    env = dict(os.environ)
    env.update(
        {
            "GYM_HOST": HOST,
            "GYM_PORT": str(port),
            "GYM_DATABASE_URL": database_url,
            "GYM_SERVER_NAME": "bench",
            "GYM_LOG_LEVEL": "warning",
            "GYM_CATALOG_WARMUP": "off",
            "GYM_SESSIONS__MAX_SESSIONS": str(max(10_000, max_sessions)),
        }
    )
    return env


def pin(pid: int, core: int) -> bool:
    """Pin a process to one core when the machine has it; returns whether it did."""
    if (os.cpu_count() or 1) <= core:
        return False
    os.sched_setaffinity(pid, {core})
    return True


CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_seconds(pid: int) -> float:
    """user + system CPU seconds of a process and all its threads, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_rss_mb(pid: int) -> float:
    kb = _first_match(f"/proc/{pid}/status", r"^VmRSS:\s+(\d+)")
    return int(kb) / 1024 if kb else float("nan")


def core_busy_seconds() -> dict[int, float]:
    """Busy (non-idle, non-iowait) seconds per core from /proc/stat: shows load from other processes."""
    busy: dict[int, float] = {}
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("cpu") and line[3:4].isdigit():
            name, *values = line.split()
            ticks = [int(v) for v in values]
            busy[int(name[3:])] = (sum(ticks[:8]) - ticks[3] - ticks[4]) / CLK_TCK
    return busy


class ManagedProcess:
    """A child process in its own session that is always stopped: SIGINT, then SIGTERM, then SIGKILL."""

    def __init__(self, name: str, argv: list[str], *, env: dict[str, str], cwd: Path, log: Path) -> None:
        self.name, self.argv, self.env, self.cwd, self.log_path = name, argv, env, cwd, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, core: int | None) -> None:
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                self.argv,
                env=self.env,
                cwd=self.cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C in the terminal reaches us, not it; we stop it ourselves
            )
        if core is not None:
            # Set right after spawn, while the interpreter is still starting: every thread it
            # creates later (uvicorn, the store writer) inherits the mask.
            pin(self.proc.pid, core)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self, grace_s: float = 15.0) -> int | None:
        """Stop it (SIGINT, then SIGTERM, then SIGKILL) and return its exit code, None if it never ran.

        A server stopped by our SIGINT exits 130 (uvicorn re-raises the signal it handled); that is a clean
        stop, reported as 0, so a caller warns only about a server that failed.
        """
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        for sig, wait_s in ((signal.SIGINT, grace_s), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            if proc.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(wait_s)
        code = proc.poll()
        return 0 if code == 128 + signal.SIGINT else code
