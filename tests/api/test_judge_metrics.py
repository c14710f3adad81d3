"""The LLM judges' counters, `judge_failed` first, scraped from the server's `/metrics`."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
from conftest import make_settings
from gymtest import judge_samples

from gym_server.app import create_app
from gym_verifiers.judge import JUDGE_FAILED, JudgeConfig, LLMJudge


async def test_metrics_export_judge_failures_retries_and_latency(tmp_path: Path) -> None:
    model = f"judge-{uuid.uuid4().hex[:8]}"  # counters are process-wide: a model of this test's own
    replies = iter(
        [
            httpx.Response(200, json={"choices": [{"message": {"content": '{"score": 7, "reason": "ok"}'}}]}),
            httpx.Response(503, text="overloaded"),
            httpx.Response(200, json={"choices": [{"message": {"content": "I cannot grade this."}}]}),
        ]
    )
    endpoint = httpx.AsyncClient(transport=httpx.MockTransport(lambda request: next(replies)))
    config = JudgeConfig(base_url="http://judge.test/v1", model=model, max_attempts=2, backoff_s=0.0)
    app = create_app(make_settings(f"sqlite:///{tmp_path / 'gym.db'}"))
    async with app.router.lifespan_context(app), endpoint, LLMJudge(config, client=endpoint) as judge:
        scored = await judge.judge(question="Name a prime.", response="7")
        failed = await judge.judge(question="Name a prime.", response="7")
        assert scored.failure is None and failed.failure == JUDGE_FAILED
        gym = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost")
        async with gym:
            scraped = await gym.get("/metrics")
    assert scraped.status_code == 200
    samples = judge_samples(scraped.text, model)
    seconds = samples.pop("gym_judge_request_seconds_total")
    assert samples == {
        "gym_judge_judgements_total": 2.0,
        "gym_judge_failed_total": 1.0,
        "gym_judge_requests_total": 3.0,
        "gym_judge_retries_total": 1.0,
        "gym_judge_transport_errors_total": 1.0,
        "gym_judge_parse_errors_total": 1.0,
    }
    assert 0.0 < seconds < 5.0
    assert judge.stats.failures == 1 and judge.stats.judgements == 2  # the judge's own view agrees
