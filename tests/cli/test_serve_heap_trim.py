"""`serve` hands free pages inside glibc's heaps back to the OS (a `heap-trim` thread): a thread's heap
that freed 60 MB of small blocks below one still in use cannot shrink from its top, so without the trim
the process keeps that memory (what was left after large transcripts closed, docs/benchmarks.md)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# Run in a fresh interpreter: the trim thread lives as long as its process, and the test shortens its
# interval. Prints the RSS in MB right after the blocks are freed, then once it has dropped (or after 5 s).
SCRIPT = textwrap.dedent(
    """
    import sys, threading, time
    from gym_server.cli import serve

    def rss_mb():
        status = open("/proc/self/status").read().splitlines()
        return int(next(line for line in status if line.startswith("VmRSS:")).split()[1]) / 1024

    if sys.argv[1] == "trim":
        serve._HEAP_TRIM_INTERVAL_S = 0.2
        serve._return_large_blocks_to_the_os()
    kept = []

    def work():
        blocks = [bytes(20_000) for _ in range(3000)]  # 60 MB, each block under the mmap threshold
        kept.append(blocks[-1])  # the heap's top stays in use
        del blocks

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    freed = rss_mb()
    deadline = time.monotonic() + 5
    while rss_mb() > freed - 15 and time.monotonic() < deadline:
        time.sleep(0.1)
    print(freed, rss_mb())
    """
)


def _rss_after_freeing(mode: str) -> tuple[float, float]:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=120, check=True
    )
    freed, later = (float(value) for value in done.stdout.split())
    return freed, later


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator, Linux only")
def test_free_heap_pages_go_back_to_the_os() -> None:
    freed, later = _rss_after_freeing("trim")
    assert freed - later >= 15, (freed, later)  # most of the 60 MB, not a page or two


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator, Linux only")
def test_without_the_trim_the_memory_stays() -> None:
    """The case the trim exists for: the same process without it keeps the freed memory (so the test
    above measures the trim, not something glibc does on its own)."""
    freed, later = _rss_after_freeing("none")
    assert freed - later < 15, (freed, later)
