"""Prometheus metrics of the session layer, in a registry of their own per app.

A registry per app (not the global default) keeps several apps in one process, as in tests, from
clashing over metric names.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["SessionMetrics"]

# Steps are sub-millisecond when tools are in-memory; sandboxed tools take up to seconds.
_STEP_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


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
        self.steps = Counter("gym_steps_total", "Steps taken.", ["env"], registry=self.registry)
        self.step_seconds = Histogram(
            "gym_step_seconds",
            "Time inside the environment per step.",
            buckets=_STEP_BUCKETS,
            registry=self.registry,
        )
        self.store_pending = Gauge(
            "gym_store_pending_rows", "Trajectory rows waiting for the writer.", registry=self.registry
        )

    def observe_step(self, env: str, seconds: float) -> None:
        self.steps.labels(env).inc()
        self.step_seconds.observe(seconds)
