"""Value types of the sandbox contract: limits, results, capped buffers, paths."""

from __future__ import annotations

import pytest

from gym_server.sandbox.protocol import CappedBuffer, ExecResult, Limits, as_argv, describe, sandbox_path
from gym_server.store.records import FailureClass


def test_limits_defaults_are_locked_down_and_validated() -> None:
    limits = Limits()
    assert (limits.memory_mb, limits.pids, limits.output_bytes, limits.timeout_s) == (256, 64, 1 << 20, 10.0)
    assert limits.with_(timeout_s=2).timeout_s == 2 and limits.timeout_s == 10.0
    with pytest.raises(ValueError, match="pids"):
        Limits(pids=0)
    with pytest.raises(ValueError, match="positive"):
        Limits(timeout_s=0)


def test_capped_buffer_keeps_the_head_and_counts_the_rest() -> None:
    buffer = CappedBuffer(5)
    for piece in (b"abc", b"defg", b"", b"hij"):
        buffer.write(piece)
    assert buffer.getvalue() == b"abcde" and buffer.total == 10 and buffer.truncated
    exact = CappedBuffer(3)
    exact.write(b"abc")
    assert not exact.truncated


@pytest.mark.parametrize(
    ("result", "status", "failure"),
    [
        (ExecResult(0), "ok", None),
        (ExecResult(1), "error", None),
        (ExecResult(137), "killed", None),
        (ExecResult(137, timed_out=True), "timeout", FailureClass.SANDBOX_TIMEOUT),
        (ExecResult(137, oom_killed=True), "oom", FailureClass.SANDBOX_OOM),
    ],
)
def test_exec_result_classification(result: ExecResult, status: str, failure: FailureClass | None) -> None:
    assert result.status == status and result.failure == failure
    assert result.ok == (status == "ok")
    assert status in repr(result)


def test_exec_result_text_and_truncation() -> None:
    result = ExecResult(0, stdout=b"caf\xc3\xa9 \xff", stderr=b"e", stderr_truncated=True)
    assert result.text() == "café \ufffd" and result.text("stderr") == "e" and result.truncated


def test_paths_and_argv() -> None:
    assert sandbox_path("a/b.txt") == "/work/a/b.txt"
    assert sandbox_path("/tmp//x/./y") == "/tmp/x/y"
    with pytest.raises(ValueError, match=r"\.\."):
        sandbox_path("a/../../etc/passwd")
    assert as_argv("echo hi") == ["/bin/sh", "-c", "echo hi"]
    assert as_argv(["python3", "-c", "pass"]) == ["python3", "-c", "pass"]
    with pytest.raises(ValueError, match="empty"):
        as_argv([])
    assert describe("x" * 200).endswith("...") and len(describe("x" * 200)) == 120
