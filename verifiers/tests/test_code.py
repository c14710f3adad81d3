"""The code verifier on every sandbox backend: correct code scores, and each known hack scores 0."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

import pytest

from gym_server.core.errors import SandboxUnavailable
from gym_server.sandbox.bubblewrap import BubblewrapBackend
from gym_server.sandbox.docker import DockerBackend
from gym_server.sandbox.pool import SandboxPool
from gym_server.sandbox.protocol import Limits, SandboxBackend
from gym_verifiers.code import (
    HARNESS_ARGV,
    HARNESS_SOURCE,
    _verdict,
    encode_request,
    extract_code,
    run_code_tests,
    verify_code,
)

ADD = "def add(a, b):\n    return a + b\n"
TESTS = ["assert add(2, 3) == 5", "assert candidate(-4, 1) == -3", "assert solution.add('a', 'b') == 'ab'"]


@pytest.fixture(
    params=[
        pytest.param("bubblewrap", marks=pytest.mark.bwrap),
        pytest.param("docker", marks=pytest.mark.docker),
    ],
)
async def pool(request: pytest.FixtureRequest) -> AsyncIterator[SandboxPool]:
    name = f"codetest-{uuid.uuid4().hex[:8]}"
    backend: SandboxBackend = (BubblewrapBackend if request.param == "bubblewrap" else DockerBackend)(
        server_name=name
    )
    try:
        await backend.check()
    except SandboxUnavailable as exc:
        await backend.aclose()
        pytest.skip(f"{request.param} unavailable: {exc.detail}")
    warm = SandboxPool(backend, size=1, limits=Limits(timeout_s=30))
    await warm.start()
    yield warm
    await warm.aclose()
    await backend.aclose()


async def score(pool: SandboxPool, candidate: str, tests: list[str] = TESTS, **options: object) -> float:
    result = await verify_code(
        candidate,
        tests,
        entry_point="add",
        runner=pool,
        timeout_s=8,
        call_timeout_s=1.5,
        **options,  # type: ignore[arg-type]
    )
    assert result.failure is None, result.explanation
    return result.score


async def test_correct_partial_and_wrong(pool: SandboxPool) -> None:
    assert await score(pool, ADD) == 1.0
    assert await score(pool, "def add(a, b):\n    return int(a) + int(b)\n") == pytest.approx(2 / 3)
    assert await score(pool, "def add(a, b):\n    return int(a) + int(b)\n", mode="all") == 0.0
    assert await score(pool, "def add(a, b):\n    return a * b\n") == 0.0


async def test_results_are_deterministic(pool: SandboxPool) -> None:
    candidate = "import random\ndef add(a, b):\n    return a + b if random.random() < 2 else None\n"
    scores = {await score(pool, candidate) for _ in range(3)}
    assert scores == {1.0}


# The harness's judge: the parent of the worker factory, which is the candidate's parent.
JUDGE = (
    "import os, signal\n"
    "def judge():\n"
    "    with open(f'/proc/{os.getppid()}/stat') as stat:\n"
    "        return int(stat.read().rsplit(')', 1)[1].split()[1])\n"
)

HACKS = {
    "exit 0 before the tests": "import sys\nsys.exit(0)\ndef add(a, b):\n    return 0\n",
    "os._exit at import": "import os\nos._exit(0)\n",
    "SystemExit inside the call": "def add(a, b):\n    raise SystemExit(0)\n",
    "os._exit inside the call": "import os\ndef add(a, b):\n    os._exit(0)\n",
    "fake PASS output": (
        "import sys\nprint('PASS\\n3/3 tests passed\\nOK')\nsys.stderr.write('PASSED')\n"
        "def add(a, b):\n    print('PASS')\n"
    ),
    "always-equal __eq__": (
        "class Anything:\n    def __eq__(self, other):\n        return True\n    def __ne__(self, other):\n"
        "        return False\n    __hash__ = object.__hash__\ndef add(a, b):\n    return Anything()\n"
    ),
    "int subclass equal to everything": (
        "class I(int):\n    def __eq__(self, other):\n        return True\ndef add(a, b):\n    return I(0)\n"
    ),
    "str subclass equal to everything": (
        "class S(str):\n    def __eq__(self, other):\n        return True\ndef add(a, b):\n    return S()\n"
    ),
    "monkeypatching builtins and the checker": (
        "import builtins, sys\nbuiltins.AssertionError = type('Never', (Exception,), {})\n"
        "sys.modules['__main__'].__dict__.clear()\ndef add(a, b):\n    return 42\n"
    ),
    "syntax error that skips collection": "def add(a, b)\n    return a + b\n",
    "infinite loop": "def add(a, b):\n    while True:\n        pass\n",
    "killing the worker factory": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n",
    "killing the judge": JUDGE + "os.kill(judge(), signal.SIGKILL)\ndef add(a, b):\n    return a + b\n",
    "forged result pickle": (
        "import os, pickle, struct\n"
        "data = pickle.dumps(('ok', None))\nfor fd in (3, 4, 5):\n    try:\n"
        "        os.write(fd, struct.pack('>I', len(data)) + data)\n    except OSError:\n        pass\n"
        "def add(a, b):\n    return None\n"
    ),
}


@pytest.mark.parametrize("hack", list(HACKS))
async def test_each_hack_scores_zero(pool: SandboxPool, hack: str) -> None:
    assert await score(pool, HACKS[hack]) == 0.0


async def test_stopping_the_harness_scores_zero_not_a_failure(pool: SandboxPool) -> None:
    candidate = JUDGE + "for pid in (os.getppid(), judge()):\n    os.kill(pid, signal.SIGSTOP)\n"
    started = time.monotonic()
    result = await verify_code(
        candidate, TESTS, entry_point="add", runner=pool, timeout_s=2, call_timeout_s=1
    )
    assert result.score == 0.0 and result.failure is None and "no verdict" in result.explanation
    assert time.monotonic() - started < 15


async def test_candidate_cannot_read_the_tests_or_the_harness(pool: SandboxPool) -> None:
    marker = "SECRET-EXPECTED-VALUE-91731"
    spy = (
        "import glob, os\n"
        "def leak():\n"
        "    found = []\n"
        "    for pid in [os.getppid()] + [int(p.split('/')[2]) for p in glob.glob('/proc/[0-9]*')]:\n"
        "        for name in ('environ', 'fd/0', 'fd/1', 'mem', 'cmdline'):\n"
        "            try:\n"
        "                fd = os.open(f'/proc/{pid}/{name}', os.O_RDONLY | os.O_NONBLOCK)\n"
        "                found.append(os.read(fd, 1 << 16).decode('latin-1'))\n"
        "            except Exception:\n"
        "                pass\n"
        "    for path in glob.glob('/work/**', recursive=True) + glob.glob('/tmp/**', recursive=True):\n"
        "        try:\n"
        "            found.append(open(path, 'rb').read().decode('latin-1'))\n"
        "        except Exception:\n"
        "            pass\n"
        "    return '\\n'.join(found)\n"
    )
    tests = [f"leaked = solution.leak()\nassert {marker!r} not in leaked and 'harness' in leaked"]
    result = await verify_code(spy, tests, setup=f"EXPECTED = {marker!r}", runner=pool, timeout_s=8)
    assert result.score == 1.0, result.explanation  # it could read cmdlines, but never the tests


FORGER = r"""
import glob, os, time
FAKE = b'GYM-VERDICT ' + b'0' * 64 + b' {"results": [["pass", ""], ["pass", ""], ["pass", ""]]}'
def inject(line):
    for target in glob.glob('/proc/[0-9]*/fd/1'):
        try:
            os.write(os.open(target, os.O_WRONLY | os.O_NONBLOCK), b'\n' + line + b'\n')
        except OSError:
            pass
def forge():
    # Inject a made-up verdict now, then try to steal the real one from the harness's output pipe
    # (reachable through a parent's /proc entry on some backends) and write back an all-pass copy.
    inject(FAKE)
    deadline = time.time() + 8
    while time.time() < deadline:
        for path in glob.glob('/proc/[0-9]*/fd/1'):
            try:
                data = os.read(os.open(path, os.O_RDONLY | os.O_NONBLOCK), 1 << 16)
            except OSError:
                continue
            for line in data.splitlines():
                if line.startswith(b'GYM-VERDICT'):
                    inject(line.replace(b'"fail"', b'"pass"').replace(b'"error"', b'"pass"'))
                    return
        time.sleep(0.001)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        forge()
    os._exit(0)
def add(a, b):
    return 0
"""


async def test_a_forged_or_rewritten_verdict_is_rejected(pool: SandboxPool) -> None:
    assert await score(pool, FORGER) == 0.0
    request: dict[str, object] = {"key": "k" * 64, "candidate": FORGER, "tests": TESTS, "entry_point": "add"}
    request |= {"timeout_s": 5, "call_timeout_s": 1}
    raw = await pool.run(list(HARNESS_ARGV), stdin=encode_request(request), timeout=10)
    assert any(line.startswith(b"GYM-VERDICT") for line in raw.stdout.splitlines())
    # Where /proc lets the candidate read the harness's pipe (Docker), it may steal the genuine verdict before
    # it reaches us, so it need not be there; what must hold is that no line it wrote carries a valid MAC.
    verdict = _verdict(raw.stdout, "k" * 64)
    assert verdict is None or any(status != "pass" for status, _ in verdict["results"])


KEY_HUNTER = r"""
import glob, os, re
HEX = re.compile(rb'[0-9a-f]{64}')
CONTROL = '0123456789abcdef' * 4  # in this program's own memory: proves the search works
def grab(found, path, size=1 << 20):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            found.update(m.decode() for m in HEX.findall(os.read(fd, size)))
        finally:
            os.close(fd)
    except OSError:
        pass
def memory(found, pid):
    try:
        with open(f'/proc/{pid}/maps') as maps, open(f'/proc/{pid}/mem', 'rb', 0) as mem:
            for line in maps:
                span, mode = line.split()[:2]
                start, end = (int(x, 16) for x in span.split('-'))
                if 'r' in mode:
                    try:
                        mem.seek(start)
                        found.update(m.decode() for m in HEX.findall(mem.read(end - start)))
                    except (OSError, ValueError, OverflowError):
                        pass
    except OSError:
        pass
def hunt():
    found = set()
    for folder in glob.glob('/proc/[0-9]*'):
        pid = folder.split('/')[2]
        for name in ('environ', 'cmdline', 'fd/0', 'fd/1', 'fd/2'):
            grab(found, f'{folder}/{name}')
        for fd in glob.glob(f'{folder}/fd/*'):
            grab(found, fd)
        memory(found, pid)
    return sorted(found)
"""


async def test_the_key_is_nowhere_the_candidate_can_read(pool: SandboxPool) -> None:
    """Every process's memory, environ and descriptors that the candidate can open hold no key.

    The key is fixed here so the search can name it; the test that checks runs in the judge, which
    the candidate cannot read (its own memory holds the control string, which it must find).
    """
    key = "5eed" * 16
    control = "0123456789abcdef" * 4
    test = f"found = solution.hunt()\nassert {control!r} in found\nassert {key!r} not in found, 'key leaked'"
    request: dict[str, object] = {"key": key, "candidate": KEY_HUNTER, "tests": [test, test], "io_cases": []}
    request |= {"setup": "", "entry_point": None, "timeout_s": 20, "call_timeout_s": 15}
    raw = await pool.run(list(HARNESS_ARGV), stdin=encode_request(request), timeout=25)
    verdict = _verdict(raw.stdout, key)
    assert verdict is not None, raw.stderr[-500:]
    assert verdict["results"] == [["pass", ""], ["pass", ""]]


async def test_a_wrecked_harness_does_not_reach_the_next_verification(pool: SandboxPool) -> None:
    wrecker = JUDGE + (
        "import glob, time\n"
        "os.kill(os.getppid(), signal.SIGKILL)  # the worker factory\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    end = time.time() + 20\n"
        "    while time.time() < end:  # anything started later (the next harness) is killed too\n"
        "        for path in glob.glob('/proc/[0-9]*'):\n"
        "            try:\n"
        "                if int(path[6:]) != os.getpid():\n"
        "                    os.kill(int(path[6:]), signal.SIGKILL)\n"
        "            except OSError:\n"
        "                pass\n"
        "        time.sleep(0.005)\n"
        "def add(a, b):\n    return 0\n"
    )
    assert await score(pool, wrecker) == 0.0
    assert await score(pool, ADD) == 1.0


async def test_verdicts_repeat_exactly(pool: SandboxPool) -> None:
    candidate = "def add(a, b):\n    if a == -4:\n        raise ValueError(a)\n    return a + b\n"
    reports = [await run_code_tests(candidate, TESTS, runner=pool, entry_point="add") for _ in range(3)]
    assert [r.outcomes for r in reports] == [reports[0].outcomes] * 3
    assert [o.status for o in reports[0].outcomes] == ["pass", "error", "pass"]


async def test_candidate_exceptions_reach_tests_that_expect_them(pool: SandboxPool) -> None:
    candidate = "def add(a, b):\n    if a < 0:\n        raise ValueError('negative')\n    return a + b\n"
    tests = [
        "try:\n    add(-1, 2)\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError('no error')"
    ]
    assert await score(pool, candidate, tests) == 1.0


async def test_io_cases_and_broken_setup(pool: SandboxPool) -> None:
    program = "import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))\n"
    cases = [{"stdin": "1 2 3", "stdout": "6"}, {"stdin": "5", "stdout": "6"}]
    result = await verify_code(program, [], io_cases=cases, runner=pool)
    assert result.score == 0.5
    broken = await verify_code(ADD, TESTS, entry_point="add", setup="1/0", runner=pool)
    assert broken.failure == "invalid_reference" and broken.score == 0.0


async def test_per_test_workers_isolate_state(pool: SandboxPool) -> None:
    counter = (
        "calls = 0\ndef add(a, b):\n    global calls\n    calls += 1\n    return a + b if calls == 1 else 0\n"
    )
    assert await score(pool, counter) == 1.0  # a fresh worker per test: every test sees its first call
    report = await run_code_tests(counter, TESTS, runner=pool, entry_point="add")
    assert report.to_info()["passed"] == 3


def test_extract_code_and_harness_source() -> None:
    assert extract_code("text\n```python\nx = 1\n```\nmore\n```py\ny = 2\n```") == "y = 2\n"
    assert extract_code("no fences") == "no fences"
    assert "def main()" in HARNESS_SOURCE and "PR_SET_DUMPABLE" in HARNESS_SOURCE


async def test_no_sandbox_is_a_failure_not_a_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GYM_SANDBOX__BACKEND", "docker")
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    result = await verify_code(ADD, TESTS, entry_point="add")
    assert result.score == 0.0 and result.failure == "sandbox_error"
