"""`gym-server env check NAME`: judge an environment before anyone trains on it.

`check_environment()` runs, on a few tasks of one split: determinism, the golden fixtures beside the
environment (`gym-server verifiers check`'s replay), the reference solution, generic reward-hack probes,
the environment's own probes and sandbox attacks (`Environment.hack_probes()`), its fork claim
(`Environment.fork_mode`, `envcheck.forking`), the reward spread of a
random baseline policy and its throughput. Everything runs in this process through the same turn engine
and deadlines the server uses; sandboxed environments use the configured sandbox backend.
"""

from __future__ import annotations

import asyncio
import time

from gym_server.core.settings import LimitSettings
from gym_server.envcheck.checks import (
    CheckContext,
    determinism,
    generic_probes,
    own_probes,
    reference,
    spread_and_throughput,
)
from gym_server.envcheck.forking import fork_claim
from gym_server.envcheck.report import CheckResult, EnvCheckReport
from gym_server.sdk.registry import EnvironmentEntry, Registry

__all__ = ["CheckResult", "EnvCheckReport", "check_environment", "fixtures_check"]


def fixtures_check(entry: EnvironmentEntry, registry: Registry) -> CheckResult:
    """Replay the golden fixtures beside the environment (its family's file for a family member)."""
    from gym_server.envcheck.golden import check_environments, environment_fixtures

    files, _ = environment_fixtures(registry)
    suites = [
        f.suite for f in files if f.default_env == entry.name or f.suite == entry.name.partition("/")[0]
    ]
    if not suites:
        return CheckResult(
            name="fixtures", status="skip", detail="no fixtures/golden.jsonl beside the environment"
        )
    results = [
        suite for suite in check_environments(registry=registry, only=suites[0]) if suite.name == suites[0]
    ]
    cases = sum(suite.cases for suite in results)
    problems = [problem for suite in results for problem in suite.problems]
    data = {"suite": suites[0], "cases": cases, "passed": sum(suite.passed for suite in results)}
    if problems:
        return CheckResult(name="fixtures", status="fail", detail="; ".join(problems[:3]), data=data)
    if any(suite.skipped for suite in results):
        detail = f"{sum(s.skipped for s in results)} of {cases} cases name environments not installed"
        return CheckResult(name="fixtures", status="warn", detail=detail, data=data)
    return CheckResult(
        name="fixtures", status="pass", detail=f"{cases} golden cases, each replayed twice", data=data
    )


def check_environment(
    entry: EnvironmentEntry,
    registry: Registry,
    *,
    tasks: int = 4,
    split: str | None = None,
    limits: LimitSettings | None = None,
) -> EnvCheckReport:
    """Every check of one environment, on its first `tasks` tasks of `split` (default: validation when
    it has one, else train, else its first split)."""
    started = time.perf_counter()
    sizes = entry.dataset.split_sizes()
    chosen = split or next((name for name in ("validation", "train", *sizes) if sizes.get(name)), "")
    report_facts = {
        "env": entry.name,
        "version": entry.version,
        "kind": "multi-turn" if entry.cls.multi_turn else "single-turn",
        "tools": [tool["function"]["name"] for tool in entry.cls.catalog_tools()],
        "tasks": sizes,
    }
    if not sizes.get(chosen):
        detail = f"no tasks in split {chosen or '-'}: nothing to check"
        checks = [CheckResult(name="tasks", status="fail", detail=detail)]
        return EnvCheckReport(**report_facts, checks=checks, seconds=round(time.perf_counter() - started, 2))
    sample = entry.dataset.task_range(chosen, 0, min(tasks, sizes[chosen]))
    context = CheckContext(entry, chosen, sample, limits or LimitSettings())
    from gym_verifiers.math import close_shared_pool

    try:
        checks = [fixtures_check(entry, registry), *asyncio.run(_checks(context))]
    finally:
        close_shared_pool()
    return EnvCheckReport(**report_facts, checks=checks, seconds=round(time.perf_counter() - started, 2))


async def _checks(context: CheckContext) -> list[CheckResult]:
    from gym_server.sandbox import runtime

    try:
        results = [await determinism(context)]
        found, references = await reference(context)
        results.append(found)
        results.append(await fork_claim(context, references))
        results.extend(await generic_probes(context, references))
        results.extend(await own_probes(context))
        results.extend(await spread_and_throughput(context))
        return results
    finally:
        await runtime.shutdown()
