"""Prometheus metrics of the session layer, in a registry of their own per app.

A registry per app (not the global default) keeps several apps in one process, as in tests, from
clashing over metric names. The LLM judges' counters are process-wide (judges belong to environments,
not to an app) and are read from `gym_verifiers.judge` at each scrape.
"""

from __future__ import annotations

import bisect
import itertools
import math
import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from gym_server.sandbox.egress.proxy import tally as egress_tally
from gym_verifiers.judge import judge_stats_by_model

__all__ = ["EgressCollector", "JudgeCollector", "SessionMetrics", "StepStats"]

# (metric name without _total, help, JudgeStats field); every series is labelled with the judge model.
_JUDGE_COUNTERS = (
    ("gym_judge_judgements", "LLM judge calls (judge or rank) that finished, scored or not.", "judgements"),
    (
        "gym_judge_failed",
        "LLM judge calls that ended judge_failed: no signal, trainers must drop them.",
        "failures",
    ),
    ("gym_judge_requests", "HTTP requests sent to LLM judge endpoints, retries included.", "requests"),
    ("gym_judge_request_seconds", "Wall time of those requests.", "request_seconds"),
    ("gym_judge_retries", "LLM judge attempts after the first.", "retries"),
    (
        "gym_judge_transport_errors",
        "LLM judge attempts without a usable completion (connection, timeout, HTTP status).",
        "transport_errors",
    ),
    ("gym_judge_parse_errors", "LLM judge completions with no valid score.", "parse_errors"),
)


class JudgeCollector(Collector):
    """Exports `JudgeStats` of every judge in the process, summed by judge model, as `gym_judge_*_total`."""

    def collect(self) -> Iterator[CounterMetricFamily]:
        by_model = judge_stats_by_model()
        for name, documentation, attribute in _JUDGE_COUNTERS:
            family = CounterMetricFamily(name, documentation, labels=["model"])
            for model, stats in sorted(by_model.items()):
                family.add_metric([model], getattr(stats, attribute))
            yield family


class EgressCollector(Collector):
    """Exports the sandboxes' egress attempts by decision as `gym_sandbox_egress_connections_total`.

    Per process, not per session: sessions are unbounded label values; the log line of each attempt
    names its session.
    """

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "gym_sandbox_egress_connections",
            "Connections sandboxes asked their egress proxy for, by decision (allowed or refused).",
            labels=["decision"],
        )
        for decision in ("allowed", "refused"):
            family.add_metric([decision], egress_tally.counts[decision])
        yield family


# Steps are sub-millisecond when tools are in-memory; sandboxed tools take up to seconds.
_STEP_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class StepStats(Collector):
    """`gym_steps_total{env}` and the `gym_step_seconds` histogram, kept in plain numbers.

    prometheus_client's `Counter` and `Histogram` take a lock and check their state on every update,
    which together cost about as much as a trivial environment's whole step. Steps are only counted on
    the event loop's thread, so plain numbers are enough here; they are turned into the same samples
    those classes export (`_total`, `_created`, `_bucket`, `_count`, `_sum`) when /metrics is scraped.
    """

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self._bounds = (*buckets, math.inf)
        # The `le` labels as prometheus_client writes these bounds (its formatter is untyped).
        self._labels = [repr(float(bound)) for bound in buckets] + ["+Inf"]
        self._buckets = [0] * len(self._bounds)
        self._sum = 0.0
        self._created = time.time()
        self._by_env: dict[str, int] = {}
        self._env_created: dict[str, float] = {}

    def observe(self, env: str, seconds: float) -> None:
        steps = self._by_env.get(env)
        if steps is None:
            steps, self._env_created[env] = 0, time.time()
        self._by_env[env] = steps + 1
        self._buckets[bisect.bisect_left(self._bounds, seconds)] += 1
        self._sum += seconds

    def collect(self) -> Iterator[Metric]:
        steps = CounterMetricFamily("gym_steps", "Steps taken.", labels=["env"])
        for env, count in self._by_env.items():
            steps.add_metric([env], count, created=self._env_created[env])
        yield steps
        histogram = HistogramMetricFamily("gym_step_seconds", "Time inside the environment per step.")
        cumulative = itertools.accumulate(self._buckets)
        histogram.add_metric([], list(zip(self._labels, cumulative, strict=True)), self._sum)
        histogram.samples.append(Sample("gym_step_seconds_created", {}, self._created))
        yield histogram


class SessionMetrics:
    """Counters and gauges the manager updates and /metrics renders."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.created = Counter(
            "gym_sessions_created_total", "Sessions created.", ["env"], registry=self.registry
        )
        self.closed = Counter(
            "gym_sessions_closed_total",
            "Sessions ended, by final status.",
            ["env", "status"],
            registry=self.registry,
        )
        self.rejected = Counter(
            "gym_sessions_rejected_total",
            "Session creations refused at capacity (429).",
            registry=self.registry,
        )
        self.live = Gauge("gym_sessions_live", "Sessions currently open.", registry=self.registry)
        self.steps = StepStats(_STEP_BUCKETS)
        self.registry.register(self.steps)
        self.store_pending = Gauge(
            "gym_store_pending_rows", "Trajectory rows waiting for the writer.", registry=self.registry
        )
        self.registry.register(JudgeCollector())
        self.registry.register(EgressCollector())

    def observe_step(self, env: str, seconds: float) -> None:
        self.steps.observe(env, seconds)
