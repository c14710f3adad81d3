"""The step counter and histogram (`StepStats`) export what prometheus_client's own classes would."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from gym_server.sessions.metrics import SessionMetrics

_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# On a bound, below the first, between two, above the last (the +Inf bucket), and zero.
_OBSERVED = [("counter", 0.001), ("counter", 0.0001), ("math", 0.07), ("counter", 45.0), ("math", 0.0)]


def _without_created(text: str) -> list[str]:
    return [line for line in text.splitlines() if "_created" not in line]


def _created_series(text: str) -> list[str]:
    return [
        line.split(" ")[0] for line in text.splitlines() if line.startswith("gym_step") and "_created" in line
    ]


def test_step_metrics_match_prometheus_clients_counter_and_histogram() -> None:
    metrics = SessionMetrics()
    reference = CollectorRegistry()
    steps = Counter("gym_steps_total", "Steps taken.", ["env"], registry=reference)
    seconds = Histogram(
        "gym_step_seconds", "Time inside the environment per step.", buckets=_BUCKETS, registry=reference
    )
    for env, elapsed in _OBSERVED:
        metrics.observe_step(env, elapsed)
        steps.labels(env).inc()
        seconds.observe(elapsed)

    ours = generate_latest(metrics.registry).decode()
    theirs = generate_latest(reference).decode()
    assert 'gym_steps_total{env="counter"} 3.0' in ours
    assert 'gym_step_seconds_bucket{le="+Inf"} 5.0' in ours
    # Same samples, in the same order, as the reference (whose families are the only ones it holds).
    wanted = _without_created(theirs)
    exported = [line for line in _without_created(ours) if line in wanted or "gym_step" in line]
    assert exported == wanted
    # And each series has its `_created` sample, as prometheus_client writes them.
    assert _created_series(ours) == _created_series(theirs)
