"""Calls into an environment under the server's deadlines: a step (one timer for all its tool calls) and a
verification (a timeout or crash becomes a failure class, never an error). Shared by the session manager,
transcript replay, `env check` and `play`."""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any

from gym_server.core.errors import AtCapacity
from gym_server.core.settings import LimitSettings
from gym_server.sdk.environment import Environment, StepOutcome, VerifyResult
from gym_server.store.records import FailureClass

__all__ = ["run_verifier", "step_with_deadline"]

log = logging.getLogger(__name__)


async def step_with_deadline(env: Environment, message: dict[str, Any], limits: LimitSettings) -> StepOutcome:
    """One step under one deadline: `tool_timeout_s` for each tool call it runs, plus one for the rest.

    A single deadline per step, not one per tool call, keeps the hot path to one timer; a tool that
    overruns it is an environment fault (the caller records `env_error`), whereas a sandboxed tool
    reports its own timeout to the model as a tool message.
    """
    calls = min(len(message.get("tool_calls") or []), limits.max_tool_calls_per_turn)
    async with asyncio.timeout(limits.tool_timeout_s * (calls + 1)):
        return await env.step(message, tool_timeout_s=math.inf, max_tool_calls=limits.max_tool_calls_per_turn)


async def run_verifier(env: Environment, timeout_s: float) -> VerifyResult:
    """Run a verifier with a deadline; a timeout or crash becomes a failure class, not an error.

    Raises:
        AtCapacity: no sandbox was free for it (within the queueing wait): not a score, so the caller
            answers 429 or tries again later.
    """
    try:
        async with asyncio.timeout(timeout_s):
            result = await env.verify()
    except AtCapacity:
        raise
    except TimeoutError:
        return VerifyResult(reward=0.0, failure=FailureClass.VERIFY_TIMEOUT, info={"timeout_s": timeout_s})
    except Exception as exc:
        log.exception("verifier of %s failed", env.name)
        return VerifyResult(reward=0.0, failure=FailureClass.VERIFY_ERROR, info={"error": type(exc).__name__})
    scores = [result.reward, *result.components.values()]
    if not all(math.isfinite(score) for score in scores):
        # NaN or infinity would poison a training batch (and JSON cannot carry it): no signal instead.
        log.error("verifier of %s returned a non-finite score: %s", env.name, scores)
        return VerifyResult(reward=0.0, failure=FailureClass.VERIFY_ERROR, info={"error": "non-finite score"})
    return result
