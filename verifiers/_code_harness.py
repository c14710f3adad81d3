"""The trusted test harness of the code verifier. Runs *inside* the sandbox; never imported by the server.

`verifiers/code.py` sends this file's text as `python3 -I -S -c <source>` and the request as JSON on
stdin: the candidate program, trusted set-up code and tests, limits, and a random key. The harness
makes itself non-dumpable (so no other process of the sandbox user can read its memory, its stdin or
its file descriptors), reads the whole request before any candidate code exists, and runs each test in
*this* process while the candidate's functions run in a separate worker process per test. Calls cross
over a pipe; results come back as pickles of plain builtins only (no classes, so no always-equal
`__eq__`), unpickled with no globals allowed, and every comparison happens here. The verdict is one
line on stdout, authenticated with an HMAC under a key that only this process and the host ever held.
Whatever the candidate does (exit early, raise SystemExit, call os._exit, print fake results, patch
modules, loop forever, kill or stop the harness) it can only fail tests or prevent the verdict: 0.
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import hmac
import io
import json
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

WORKER = r"""
import os, pickle, struct, sys, types
rd = os.fdopen(os.dup(0), "rb", 0)
wr = os.fdopen(os.dup(1), "wb", 0)
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
try:
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")
except OSError:
    pass
PLAIN = (int, float, complex, str, bytes, bool, type(None))
def plain(value, depth=0):
    if depth > 100:
        raise TypeError("the returned value is nested too deeply")
    kind = type(value)
    if kind in PLAIN:
        return value
    if kind in (list, tuple, set, frozenset):
        return kind(plain(v, depth + 1) for v in value)
    if kind is dict:
        return {plain(k, depth + 1): plain(v, depth + 1) for k, v in value.items()}
    raise TypeError("returned an object of type %s; only plain builtin values are compared" % kind.__name__)
def read_exact(size):
    chunks = []
    while size:
        chunk = rd.read(size)
        if not chunk:
            os._exit(0)
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)
def recv():
    return pickle.loads(read_exact(struct.unpack(">I", read_exact(4))[0]))
def send(message):
    data = pickle.dumps(message, protocol=4)
    wr.write(struct.pack(">I", len(data)) + data)
module = types.ModuleType("solution")
module.__file__ = "solution.py"
sys.modules["solution"] = module
try:
    exec(compile(recv()[1], "solution.py", "exec"), module.__dict__)
    send(("ok", None))
except BaseException as exc:
    send(("error", type(exc).__name__, str(exc)[:300]))
    os._exit(0)
while True:
    _, name, args, kwargs = recv()
    try:
        send(("ok", plain(getattr(module, name)(*args, **kwargs))))
    except BaseException as exc:
        send(("error", type(exc).__name__, str(exc)[:300]))
"""

_ALLOWED = {"complex", "set", "frozenset"}
_NOT_RERAISED = (AssertionError, StopIteration, StopAsyncIteration)
MAX_REPLY = 64 << 20


class CandidateError(Exception):
    """The candidate raised, crashed, returned something not comparable, or ran out of time."""


class CandidateTimeout(CandidateError):
    """A call into the candidate ran past its time limit."""


class _Strict(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins" and name in _ALLOWED:
            return getattr(builtins, name)
        raise pickle.UnpicklingError(f"the candidate sent a {module}.{name}")


def _nondumpable() -> None:
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
    except Exception:
        pass


class Worker:
    """One candidate process for one test: load the program, then serve calls until killed."""

    def __init__(self, source: str, folder: str, deadline: float, call_timeout: float) -> None:
        self.deadline = deadline
        self.call_timeout = call_timeout
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": folder,
            "LANG": "C.UTF-8",
            "PYTHONHASHSEED": "0",
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
            start_new_session=True,
            cwd=folder,
            env=env,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        self._send(("load", source))
        reply = self._recv()
        if reply[0] != "ok":
            raise CandidateError(f"the program failed to load: {reply[1]}: {reply[2]}")

    def _send(self, message: tuple[Any, ...]) -> None:
        data = pickle.dumps(message, protocol=4)
        try:
            self.stdin.write(struct.pack(">I", len(data)) + data)
            self.stdin.flush()
        except OSError:
            raise CandidateError("the candidate process has exited") from None

    def _read(self, size: int, until: float) -> bytes:
        fd = self.stdout.fileno()
        chunks, left = [], size
        while left:
            wait = until - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                self.kill()
                raise CandidateTimeout("the call did not return within its time limit")
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                raise CandidateError("the candidate process exited during the call")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _recv(self) -> Any:
        until = min(self.deadline, time.monotonic() + self.call_timeout)
        size = struct.unpack(">I", self._read(4, until))[0]
        if size > MAX_REPLY:
            raise CandidateError(f"the candidate returned more than {MAX_REPLY} bytes")
        try:
            return _Strict(io.BytesIO(self._read(size, until))).load()
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, RecursionError) as exc:
            raise CandidateError(f"the returned value is not a plain builtin value ({exc})") from None

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self._send(("call", name, args, kwargs))
        reply = self._recv()
        if reply[0] == "ok":
            return reply[1]
        kind = getattr(builtins, str(reply[1]), None)
        message = f"{reply[1]}: {reply[2]}"
        if isinstance(kind, type) and issubclass(kind, Exception) and not issubclass(kind, _NOT_RERAISED):
            raise kind(message)  # lets tests expect e.g. a ValueError from the candidate
        raise CandidateError(message)

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def _bind(namespace: dict[str, Any], worker: Worker, entry_point: str | None) -> None:
    def proxy(name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            return worker.call(name, args, kwargs)

        call.__name__ = name
        return call

    class Solution:
        def __getattr__(self, name: str) -> Callable[..., Any]:
            return proxy(name)

    namespace["solution"] = Solution()
    if entry_point:
        namespace["candidate"] = namespace[entry_point] = proxy(entry_point)


def _run_test(
    request: dict[str, Any], base: dict[str, Any], test: str, folder: str, deadline: float
) -> list[str]:
    worker = None
    try:
        worker = Worker(request["candidate"], folder, deadline, request["call_timeout_s"])
        namespace = dict(base)
        # Set-up functions (HumanEval's `check`) resolve globals in `base`: bind the proxies there too.
        _bind(base, worker, request.get("entry_point"))
        _bind(namespace, worker, request.get("entry_point"))
        exec(compile(test, "<test>", "exec"), namespace)
        return ["pass", ""]
    except CandidateTimeout as exc:
        return ["timeout", str(exc)]
    except AssertionError as exc:
        return ["fail", f"AssertionError: {exc}"[:300]]
    except BaseException as exc:
        return ["error", f"{type(exc).__name__}: {exc}"[:300]]
    finally:
        if worker is not None:
            worker.kill()


def _run_io(request: dict[str, Any], case: dict[str, str], folder: str, deadline: float) -> list[str]:
    path = os.path.join(folder, "solution.py")
    with open(path, "w") as handle:
        handle.write(request["candidate"])
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": folder, "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
    timeout = max(0.01, min(request["call_timeout_s"], deadline - time.monotonic()))
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        close_fds=True,
        start_new_session=True,
        cwd=folder,
        env=env,
    )
    try:
        out, _ = proc.communicate(case.get("stdin", "").encode(), timeout=timeout)
    except subprocess.TimeoutExpired:
        return ["timeout", "the program did not finish within its time limit"]
    finally:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    got = [line.rstrip() for line in out[: 1 << 20].decode("utf-8", "replace").strip().splitlines()]
    want = [line.rstrip() for line in case.get("stdout", "").strip().splitlines()]
    if got == want:
        return ["pass", ""]
    return ["fail", f"expected {chr(10).join(want)[:100]!r}, got {chr(10).join(got)[:100]!r}"]


def main() -> None:
    _nondumpable()
    request = json.loads(sys.stdin.buffer.read())
    out = os.fdopen(os.dup(1), "w")
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    started = time.monotonic()
    deadline = started + request["timeout_s"]
    results: list[list[str]] = []
    verdict: dict[str, Any] = {"results": results, "compiled": True}
    try:
        compile(request["candidate"], "solution.py", "exec")
    except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError) as exc:
        verdict["compiled"] = False
        verdict["error"] = f"{type(exc).__name__}: {exc}"[:300]
    base = {"__name__": "__gym_tests__", "CandidateError": CandidateError}
    if verdict["compiled"]:
        try:
            exec(compile(request.get("setup", ""), "<setup>", "exec"), base)
        except BaseException as exc:
            verdict["setup_error"] = f"{type(exc).__name__}: {exc}"[:300]
    for index, test in enumerate(request.get("tests", [])):
        if not verdict["compiled"] or "setup_error" in verdict:
            results.append(["error", str(verdict.get("error") or verdict.get("setup_error"))])
        elif time.monotonic() >= deadline:
            results.append(["timeout", "no time left for this test"])
        else:
            folder = tempfile.mkdtemp(prefix=f"t{index}-")
            results.append(_run_test(request, base, test, folder, deadline))
    for index, case in enumerate(request.get("io_cases", [])):
        if not verdict["compiled"]:
            results.append(["error", verdict["error"]])
        elif time.monotonic() >= deadline:
            results.append(["timeout", "no time left for this test"])
        else:
            folder = tempfile.mkdtemp(prefix=f"io{index}-")
            results.append(_run_io(request, case, folder, deadline))
    verdict["seconds"] = round(time.monotonic() - started, 3)
    # Other processes of the sandbox user may be able to open this process's stdout pipe through a
    # parent's /proc entry, read what is written and write their own lines: the verdict is therefore
    # authenticated with a key that only this process and the host ever held.
    body = json.dumps(verdict)
    mac = hmac.new(request["key"].encode(), body.encode(), hashlib.sha256).hexdigest()
    out.write(f"\nGYM-VERDICT {mac} {body}\n")
    out.flush()


if __name__ == "__main__":
    main()
