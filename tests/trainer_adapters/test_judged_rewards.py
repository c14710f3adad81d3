"""Judged rewards as configuration: the `inbox` environment scored by the judge the operator configured.

The judge is a real OpenAI-compatible server over loopback HTTP in both tests: the gym's CPU policy server
with the tiny model (which cannot write a grade, so every judgement must end `judge_failed`, stored as the
trajectory's failure and counted on `/metrics`), and a scripted grader (a real HTTP app that always
answers `{"score": 9}`, standing in for a capable judge model, which this machine cannot run) to prove
that a grade flows into the reward and that the distractor gate runs before any judge call.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from conftest import make_settings
from fastapi import FastAPI, Request
from gymtest import judge_samples

from gym_env_inbox.env import InboxEnv
from gym_server.app import create_app
from gym_server.core.settings import JudgeSettings, Settings

TASK = InboxEnv.dataset().get("inbox-00000")


def _answer(text: str, ids: list[str]) -> dict[str, Any]:
    arguments = orjson.dumps({"text": text, "message_ids": ids}).decode()
    call = {"id": "call_1", "type": "function", "function": {"name": "answer", "arguments": arguments}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


async def _episode(gym: httpx.AsyncClient, message: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    created = await gym.post("/v1/sessions", json={"env": "inbox", "task_id": "inbox-00000", "seed": 0})
    assert created.status_code == 201, created.text
    session = created.json()["session_id"]
    stepped = await gym.post(f"/v1/sessions/{session}/step", json={"message": message})
    assert stepped.status_code == 200 and stepped.json()["done"], stepped.text
    verdict = await gym.post(f"/v1/sessions/{session}/verify")
    assert verdict.status_code == 200, verdict.text
    return session, verdict.json()


@asynccontextmanager
async def _gym(tmp_path: Path, judge: dict[str, Any]) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(make_settings(f"sqlite:///{tmp_path / 'gym.db'}", judge=judge))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as gym:
            yield gym


async def test_the_policy_server_as_judge_fails_cleanly_into_judge_failed(
    policy_url: str, tmp_path: Path
) -> None:
    assert TASK is not None
    judge = {"url": f"{policy_url}/v1", "model": "tiny", "max_attempts": 2, "timeout_s": 20, "max_tokens": 24}
    async with _gym(tmp_path, judge) as gym:
        right = _answer(TASK.answer["answers"][0], TASK.answer["message_ids"])
        session, verdict = await _episode(gym, right)
        assert verdict["failure"] == "judge_failed" and verdict["reward"] == 0.0
        assert "judge failed after 2 attempt(s)" in verdict["info"]["explanation"]
        assert (await gym.delete(f"/v1/sessions/{session}")).status_code == 204
        for _ in range(100):  # the store writes closes in batches
            stored = (await gym.get(f"/v1/rollouts/{session}")).json()
            if stored.get("status") != "live":
                break
            await asyncio.sleep(0.05)
        assert stored["failure"] == "judge_failed"  # kept out of training: trainers drop failures
        samples = judge_samples((await gym.get("/metrics")).text, "tiny")
    assert samples["gym_judge_failed_total"] >= 1 and samples["gym_judge_requests_total"] >= 2
    assert samples["gym_judge_parse_errors_total"] >= 2 and samples["gym_judge_request_seconds_total"] > 0


async def test_a_grade_flows_into_the_reward_and_the_gate_runs_before_the_judge(
    serve: Callable[[Any], AbstractContextManager[Any]], tmp_path: Path
) -> None:
    assert TASK is not None
    prompts: list[list[dict[str, str]]] = []
    grader = FastAPI()

    @grader.post("/v1/chat/completions")
    async def grade(request: Request) -> dict[str, Any]:
        prompts.append((await request.json())["messages"])
        return {
            "choices": [{"message": {"role": "assistant", "content": '{"reason": "same code", "score": 9}'}}]
        }

    with serve(grader) as served:
        async with _gym(tmp_path, {"url": f"{served.url}/v1", "model": "grader-9"}) as gym:
            _, verdict = await _episode(
                gym, _answer("It is " + TASK.answer["answers"][0], TASK.answer["message_ids"])
            )
            calls = len(prompts)
            hedged = f"{TASK.answer['answers'][0]} or {TASK.answer['distractors'][0]}"
            _, gated = await _episode(gym, _answer(hedged, TASK.answer["message_ids"]))
    assert verdict["failure"] is None and verdict["info"]["scored_by"] == "judge"
    assert verdict["components"]["answer"] == pytest.approx(0.9)
    assert verdict["reward"] == pytest.approx(0.7 * 0.9 + 0.3 * 1.0)
    assert InboxEnv.judge_rubric is not None
    assert calls >= 1 and InboxEnv.judge_rubric in prompts[0][1]["content"]
    assert TASK.answer["answers"][0] in prompts[0][1]["content"]  # the reference is shown to the judge
    assert gated["reward"] == 0.0 and gated["info"]["scored_by"] == "gate" and len(prompts) == calls


def test_judge_settings_are_checked_at_start() -> None:
    with pytest.raises(ValueError, match="GYM_JUDGE__MODEL"):
        JudgeSettings(url="http://127.0.0.1:1/v1")
    with pytest.raises(ValueError, match="http"):
        JudgeSettings(url="127.0.0.1:1/v1", model="m")
    with pytest.raises(ValueError, match="VERIFY_TIMEOUT_S"):
        Settings(
            judge={"url": "http://127.0.0.1:1/v1", "model": "m", "timeout_s": 30},
            limits={"verify_timeout_s": 60},
        )
    assert Settings(judge={"url": "http://127.0.0.1:1/v1", "model": "m"}).judge.api_key is None
