"""CPU seconds per test (user + system, of the test process and of the children it waited for), the
measure that matters on CI's 2-core machine, where the suite is CPU-bound and wall time says more about
the other workers than about the test. Each test's reports carry `("cpu_s", seconds)` in their user
properties (pytest-xdist sends them to the controller); `--cpu-top N` lists the N costliest tests and
the suite's total at the end, as `--durations` does for wall time.

Children count once reaped: the `gym-server serve` processes and CLIs a test starts and waits for are in
the test's figure, a process still running when the test ends is not. The CPU of a session-scoped
fixture lands in the test that first used it (set-up) or last ran (tear-down).
"""

from __future__ import annotations

import resource
from collections.abc import Generator

import pytest


def cpu_seconds() -> float:
    """User + system seconds of this process and its reaped children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class CpuTime:
    """The plugin: a mark before each test, a figure on each of its phase reports."""

    def __init__(self, top: int) -> None:
        self.top = top
        self.marks: dict[str, float] = {}
        self.per_test: dict[str, float] = {}

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.marks[nodeid] = cpu_seconds()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item) -> Generator[None, pytest.TestReport, None]:
        outcome = yield
        now = cpu_seconds()
        spent = now - self.marks.get(item.nodeid, now)
        self.marks[item.nodeid] = now
        outcome.get_result().user_properties.append(("cpu_s", round(spent, 3)))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if name == "cpu_s" and isinstance(value, float | int):
                self.per_test[report.nodeid] = self.per_test.get(report.nodeid, 0.0) + value

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.top or not self.per_test:
            return
        total = sum(self.per_test.values())
        terminalreporter.write_sep("=", f"{self.top} costliest tests in CPU seconds (all: {total:.0f} s)")
        ranked = sorted(self.per_test.items(), key=lambda entry: entry[1], reverse=True)
        for nodeid, seconds in ranked[: self.top]:
            terminalreporter.write_line(f"{seconds:8.1f}s cpu  {nodeid}")


def add_option(parser: pytest.Parser) -> None:
    """`--cpu-top N` (0, the default, lists nothing; the figures are measured either way)."""
    parser.addoption(
        "--cpu-top", type=int, default=0, metavar="N", help="list the N tests that cost the most CPU seconds"
    )


def register(config: pytest.Config) -> None:
    """Register the plugin once per process (controller and xdist workers alike)."""
    if not config.pluginmanager.has_plugin("cputime-plugin"):
        config.pluginmanager.register(CpuTime(config.getoption("--cpu-top")), "cputime-plugin")
