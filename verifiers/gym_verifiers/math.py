"""Math answers: is the completion's final answer mathematically equal to the reference?

The final answer is extracted in the caller's process (`format.final_answer`: last `\\boxed{}`, else
`<answer>` tags, else "the answer is ..."), cheap checks refuse what never needs a parser, and only then
are the reference and the answer parsed and compared by math-verify (LaTeX to sympy) in a
`gym_server.workers.WorkerPool` child, under a wall-clock timeout. That is the only safe place: parsing
`9^{9^{9^9}}` or `(10^{10})!` spins inside C code for minutes, and math-verify's own `signal.alarm`
timeouts fail off the main thread and cannot interrupt C anyway. The worker is killed instead.

Outcomes (`score` in [0, 1], components `correct`, `extracted`, `hedged`):

- 1.0: the answer equals the reference (`0.75` = `\\frac{3}{4}`, `x = 3` = `3`, `2\\sqrt{2}` = `\\sqrt{8}`).
- 0.0: no final answer; a wrong one; an answer **not in the form the task asks for** (`form`, see
  `_math_form`: by default the reference's shape, so a plain-number reference wants a literal number
  with fractions in lowest terms, and `\\boxed{(38 + 15) \\times 29 - 19}` or `\\boxed{\\frac{74}{60}}`
  score 0 even though they equal the reference; `form="any"` turns the check off); an answer over
  `MAX_ANSWER_CHARS`, nested past `MAX_NESTING` or in a completion over `format.MAX_TEXT_CHARS`
  (refused unparsed); or **hedging**: several different boxed or tagged answers (0 even when one is
  right: spraying guesses must never beat committing to one), or a disjunction such as
  `1 \\text{ or } 2` when the reference has none.
- 0.0 with failure `verify_timeout`: the comparison ran past `timeout_s`; `verify_crashed`: the worker died;
  `invalid_reference`: the task's reference does not parse. These must not be trained on.

The shared pool: `math_match` without a `pool` uses one process-wide pool, created on first use (size: the
usable CPUs, at most 4; 1 GiB address space per worker; recycled every 10,000 calls) whose workers
preload math-verify, and closed at interpreter exit. `close_shared_pool()` closes it sooner (tests, a
server's shutdown); the next call creates a fresh one.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import re
import threading
from typing import Any

from gym_server.sdk.runtime import WorkerError, WorkerPool, WorkerTimeout
from gym_verifiers._math_form import ANSWER_FORMS, AnswerForm, form_problem
from gym_verifiers.format import MAX_CANDIDATES, MAX_TEXT_CHARS, final_answer, strip_math_delimiters
from gym_verifiers.result import Failure, VerifierResult

__all__ = [
    "ANSWER_FORMS",
    "DEFAULT_TIMEOUT_S",
    "MAX_ANSWER_CHARS",
    "AnswerForm",
    "close_shared_pool",
    "create_pool",
    "math_match",
    "math_match_sync",
    "shared_pool",
]

DEFAULT_TIMEOUT_S = 3.0  # a real comparison takes about a millisecond; this is only for pathological input
MAX_ANSWER_CHARS = 1_000
MAX_NESTING = 40  # brace depth; deeper "answers" are parser bombs

_DISJUNCTION = re.compile(r"\bor\b|\\lor(?![a-zA-Z])|\\vee(?![a-zA-Z])", re.IGNORECASE)
# Component sets: every result carries the same three keys, so they aggregate across a batch.
_NO_ANSWER = {"correct": 0.0, "extracted": 0.0, "hedged": 0.0}
_WRONG = {"correct": 0.0, "extracted": 1.0, "hedged": 0.0}
_HEDGED = {"correct": 0.0, "extracted": 1.0, "hedged": 1.0}
_RIGHT = {"correct": 1.0, "extracted": 1.0, "hedged": 0.0}


async def math_match(
    completion: str,
    reference: str,
    *,
    pool: WorkerPool | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    form: AnswerForm = "auto",
) -> VerifierResult:
    """Score `completion` against the LaTeX or plain `reference`, in a worker, without blocking the loop.

    `form` is the form the answer must be written in (see the module docstring); `auto` follows the
    reference's shape.
    """
    reference = strip_math_delimiters(reference)
    plan = _plan(completion, reference, form)
    if isinstance(plan, VerifierResult):
        return plan
    try:
        return await (pool or shared_pool()).run(_judge, plan, reference, timeout_s=timeout_s)
    except WorkerError as exc:
        return _worker_failure(exc, timeout_s)


def math_match_sync(
    completion: str,
    reference: str,
    *,
    pool: WorkerPool | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    form: AnswerForm = "auto",
) -> VerifierResult:
    """`math_match` for synchronous callers (the CLI, golden checks); blocks the calling thread."""
    reference = strip_math_delimiters(reference)
    plan = _plan(completion, reference, form)
    if isinstance(plan, VerifierResult):
        return plan
    try:
        return (pool or shared_pool()).run_sync(_judge, plan, reference, timeout_s=timeout_s)
    except WorkerError as exc:
        return _worker_failure(exc, timeout_s)


def _plan(completion: str, reference: str, form: AnswerForm) -> tuple[str, ...] | VerifierResult:
    """The candidate answers to send to a worker, or the verdict when none needs sending."""
    if form not in ANSWER_FORMS:
        return VerifierResult.zero(
            f"unknown answer form {form!r}; one of {sorted(ANSWER_FORMS)}",
            _WRONG,
            Failure.INVALID_REFERENCE,
        )
    if len(completion) > MAX_TEXT_CHARS:
        return VerifierResult.zero(
            f"completion longer than {MAX_TEXT_CHARS} characters; refused unread", _NO_ANSWER
        )
    answer = final_answer(completion)
    if answer.text is None:
        return VerifierResult.zero("no final answer; put it in \\boxed{}", _NO_ANSWER)
    candidates = tuple(strip_math_delimiters(candidate) for candidate in answer.candidates)
    if len(candidates) > MAX_CANDIDATES:
        return VerifierResult.zero(f"hedged: {len(candidates)} different {answer.source} answers", _HEDGED)
    for candidate in candidates:
        if len(candidate) > MAX_ANSWER_CHARS:
            return VerifierResult.zero(
                f"answer longer than {MAX_ANSWER_CHARS} characters; refused unparsed", _WRONG
            )
        if _nesting(candidate) > MAX_NESTING:
            return VerifierResult.zero(
                f"answer nests braces deeper than {MAX_NESTING}; refused unparsed", _WRONG
            )
        if _DISJUNCTION.search(candidate) and not _DISJUNCTION.search(reference):
            return VerifierResult.zero(
                f"hedged: {_short(candidate)!r} offers alternatives; commit to one", _HEDGED
            )
        problem = form_problem(candidate, reference, form)
        if problem is not None:
            return VerifierResult.zero(f"{_short(candidate)!r} is {problem}", _WRONG)
    return candidates


def _judge(candidates: tuple[str, ...], reference: str) -> VerifierResult:
    """Runs in a worker: parse the reference and every candidate, and compare them with math-verify."""
    from math_verify import verify  # preloaded by the pool's workers; never imported by the server

    gold = _parse(reference)
    if not gold:
        return VerifierResult.zero(
            f"reference {_short(reference)!r} does not parse", _WRONG, Failure.INVALID_REFERENCE
        )
    verdicts = [bool(verify(gold, _parse(candidate), timeout_seconds=None)) for candidate in candidates]
    final = _short(candidates[-1])
    if all(verdicts):
        return VerifierResult.binary(True, f"{final!r} equals the reference", _RIGHT)
    if len(candidates) > 1:
        right = sum(verdicts)
        return VerifierResult.zero(
            f"hedged: {len(candidates)} different answers, {right} of them right", _HEDGED
        )
    return VerifierResult.zero(f"{final!r} does not equal the reference", _WRONG)


@functools.lru_cache(maxsize=2048)
def _parse(latex: str) -> list[Any]:
    """math-verify's parse of one answer, boxed so its LaTeX extraction applies; cached per worker."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    config = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    # parsing_timeout=None: no SIGALRM inside the worker; the pool's kill is the timeout.
    return list(parse("\\boxed{" + latex + "}", extraction_config=config, parsing_timeout=None))


def _warm_up() -> None:
    """Worker initializer: silence math-verify's no-timeout warning and load its lazy parts once."""
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    _judge(("\\frac{1}{2}",), "0.5")


def _worker_failure(exc: WorkerError, timeout_s: float) -> VerifierResult:
    if isinstance(exc, WorkerTimeout):
        return VerifierResult.zero(
            f"comparison ran past {timeout_s:g} s and was killed", _WRONG, Failure.VERIFY_TIMEOUT
        )
    return VerifierResult.zero(f"verifier worker failed: {exc}", _WRONG, Failure.VERIFY_CRASHED)


def _nesting(text: str) -> int:
    depth = deepest = 0
    for ch in text:
        if ch == "{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch == "}":
            depth = max(0, depth - 1)
    return deepest


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- the shared pool ---------------------------------------------------------------------------------


class _SharedPool:
    """The process-wide math pool: created on first use, replaced if closed, closed at exit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: WorkerPool | None = None
        self._registered = False

    def get(self) -> WorkerPool:
        with self._lock:
            if self._pool is None or self._pool.closed:
                self._pool = create_pool()
                if not self._registered:
                    atexit.register(self.close)
                    self._registered = True
            return self._pool

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()


def create_pool(size: int | None = None) -> WorkerPool:
    """A new pool configured for math-verify, like the shared one; the caller owns it and must close it.

    `size` defaults to the usable CPUs, at most 4.
    """
    if size is None:
        usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        size = max(1, min(4, usable))
    return WorkerPool(
        size=size,
        preload=("math_verify", __name__),
        initializer=_warm_up,
        memory_limit_bytes=1 << 30,
        max_calls_per_worker=10_000,
        name="math-verify",
    )


_SHARED = _SharedPool()


def shared_pool() -> WorkerPool:
    """The process-wide math-verify pool (created on first use; see the module docstring)."""
    return _SHARED.get()


def close_shared_pool() -> None:
    """Close the shared pool now (idempotent); a later call to `math_match` starts a fresh one."""
    _SHARED.close()
