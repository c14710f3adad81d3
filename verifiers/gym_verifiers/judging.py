"""The gym's LLM judge as configuration: one `LLMJudge` per event loop, built from `Settings.judge`.

An environment that wants judged rewards declares a rubric (`Environment.judge_rubric`) and, in
`verify()`, calls `judge_response(...)`: it returns the judge's `VerifierResult`, or None when the
operator configured no judge (`GYM_JUDGE__URL` empty), in which case the environment scores by its own
rules. A judge that cannot decide (endpoint down, unparseable replies after `max_attempts`) returns a
zero with failure `judge_failed`, which the session stores as the trajectory's failure class and
trainers drop; it is never a 0 to learn from. Calls, failures, retries and latency are counted per
judge model and exported on `/metrics` (`gym_judge_*`, see `sessions/metrics.py`).

The server installs its settings with `start(settings)` and closes the judges with `shutdown()`; any
other caller (a test, the CLI's `play`) gets the process settings (`get_settings()`) on first use, or
the settings it `start`ed. Judges are kept per event loop because their httpx client belongs to the loop
that made it.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass

from gym_server.core.settings import JudgeSettings, Settings, get_settings
from gym_verifiers.judge import JudgeConfig, LLMJudge
from gym_verifiers.result import VerifierResult

__all__ = ["judge_config", "judge_response", "shutdown", "start"]


@dataclass
class _Runtime:
    settings: JudgeSettings
    judge: LLMJudge | None = None


_runtimes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Runtime] = weakref.WeakKeyDictionary()


def judge_config(settings: JudgeSettings) -> JudgeConfig | None:
    """The judge library's config for these settings, or None when no judge is configured."""
    if not settings.url:
        return None
    return JudgeConfig(
        base_url=settings.url,
        model=settings.model,
        api_key=settings.api_key.get_secret_value() if settings.api_key else None,
        timeout_s=settings.timeout_s,
        max_attempts=settings.max_attempts,
        max_tokens=settings.max_tokens,
        json_mode=settings.json_mode,
    )


async def start(settings: Settings) -> None:
    """Use `settings.judge` on the running loop (server start-up); replaces, and closes, an earlier one."""
    await shutdown()
    _runtimes[asyncio.get_running_loop()] = _Runtime(settings.judge)


async def shutdown() -> None:
    """Close the running loop's judge, if one was made; the next use builds it again from settings."""
    runtime = _runtimes.pop(asyncio.get_running_loop(), None)
    if runtime is not None and runtime.judge is not None:
        await runtime.judge.aclose()


def _judge() -> LLMJudge | None:
    loop = asyncio.get_running_loop()
    runtime = _runtimes.get(loop)
    if runtime is None:
        runtime = _runtimes[loop] = _Runtime(get_settings().judge)
    if runtime.judge is None:
        config = judge_config(runtime.settings)
        if config is None:
            return None
        runtime.judge = LLMJudge(config)
    return runtime.judge


async def judge_response(
    rubric: str, *, question: str, response: str, reference: str | None = None
) -> VerifierResult | None:
    """Score `response` in [0, 1] by `rubric` with the configured judge; None when there is none.

    The result's `failure` is `judge_failed` when the judge could not decide (see the module docstring).
    """
    judge = _judge()
    if judge is None:
        return None
    return await judge.judge(question=question, response=response, reference=reference, rubric=rubric)
