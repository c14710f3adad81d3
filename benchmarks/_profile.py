"""Sample the server with py-spy while the benchmark loads it, and summarize where its CPU went.

Why py-spy: it samples a running process from outside, so the server runs exactly the code that was
measured (no cProfile hooks inflating every call), and `--nonblocking` keeps it from pausing the
server. The raw (collapsed-stack) output is summarized here into the functions that burn the most
samples themselves ("self") and those with the most samples anywhere below them ("inclusive"), which
is what a report of hot spots needs; the same file also feeds flamegraph tools.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ProfileSummary", "PySpy", "summarize"]

# A frame in py-spy's raw output: "function (path/to/file.py:123)".
_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>.*?)(?::(?P<line>\d+))?\)$")


class PySpy:
    """`py-spy record` attached to one pid; `stop()` ends it and leaves the raw profile at `path`."""

    def __init__(self, pid: int, path: Path, *, rate: int = 200, core: int | None = None) -> None:
        self.pid, self.path, self.rate, self.core = pid, path, rate, core
        self.proc: subprocess.Popen[bytes] | None = None

    @staticmethod
    def available() -> bool:
        return shutil.which("py-spy") is not None

    def start(self) -> None:
        # --gil keeps only samples of the thread holding the GIL: for a Python server that is its CPU
        # time, without threads parked on a condition or the loop waiting in epoll.
        argv = ["py-spy", "record", "--pid", str(self.pid), "--rate", str(self.rate), "--nonblocking"]
        argv += ["--gil", "--threads", "--format", "raw", "--output", str(self.path)]
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
        )
        if self.core is not None and (os.cpu_count() or 1) > self.core:
            os.sched_setaffinity(self.proc.pid, {self.core})

    def stop(self, timeout_s: float = 20.0) -> str:
        """SIGINT makes py-spy write its output and exit; returns its stderr for the record."""
        proc, self.proc = self.proc, None
        if proc is None:
            return ""
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate(timeout=5)
        return err.decode(errors="replace")


@dataclass(slots=True)
class ProfileSummary:
    samples: int
    threads: list[tuple[str, int]]
    self_top: list[tuple[str, int]]
    inclusive_top: list[tuple[str, int]]  # frames below `max_share`: the roots everyone shares are noise


def _short(frame: str) -> str:
    """`func (…/site-packages/pkg/mod.py:12)` -> `pkg/mod.py:func`: readable in a table."""
    match = _FRAME.match(frame.strip())
    if not match:
        return frame.strip()
    path = match.group("file")
    for marker in ("site-packages/", "/work/main/", "lib/python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{path}:{match.group('func')}"


def summarize(path: Path, top: int = 25, max_share: float = 0.4) -> ProfileSummary:
    """Self and inclusive sample counts per function from a py-spy raw file (one stack per line)."""
    self_counts: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_short(f) for f in stack.split(";")]
        # With --threads py-spy puts the thread ("thread (0x...)") first; the loop's is the main one.
        thread = next((f for f in frames if f.startswith(("process ", "thread "))), "?")
        frames = [f for f in frames if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        threads[thread] += count
        total += count
        self_counts[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    below = Counter({name: n for name, n in inclusive.items() if n <= max_share * total})
    return ProfileSummary(total, threads.most_common(8), self_counts.most_common(top), below.most_common(top))
