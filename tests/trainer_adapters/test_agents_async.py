"""`AgentRolloutFunc(max_staleness=1)`: a user's own agent played ahead of the trainer through the gym's
rollout buffer, the gateway recording on each call the version the trainer announced."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from conftest import ServerProcess

pytest.importorskip("openai")
pytest.importorskip("mcp")
pytest.importorskip("transformers")

from react_agent import react_agent

from gym_trainer.agents import ServedPolicy
from gym_trainer.trl import AgentRolloutFunc, gym_prompt

pytestmark = pytest.mark.slow

RUN = "agents-async-test"


@pytest.fixture
def gym(server_factory: Callable[..., ServerProcess], tmp_path: Path) -> ServerProcess:
    server = server_factory(f"sqlite:///{tmp_path / 'gym.db'}", GYM_LOG_LEVEL="warning")
    server.start(timeout_s=120)
    return server


def test_async_agent_steps_get_whole_groups_within_the_bound(
    gym: ServerProcess, tiny_model: Any, tiny_tokenizer: Any
) -> None:
    policy = ServedPolicy(tiny_model, tiny_tokenizer, name="tiny").start()
    rollout = AgentRolloutFunc(
        gym.url, react_agent, upstream=policy.base_url, model="tiny", run=RUN, max_staleness=1, concurrency=4
    )
    try:
        with httpx.Client(base_url=gym.url) as client:
            for step in range(3):
                prompts = [gym_prompt("counter", "play", task_id=f"counter-000{step}", seed=3)] * 2
                trainer = SimpleNamespace(
                    model=tiny_model,
                    processing_class=tiny_tokenizer,
                    state=SimpleNamespace(global_step=step),
                    args=SimpleNamespace(max_completion_length=48),
                )
                out = rollout(prompts, trainer)
                assert len(out["prompt_ids"]) == 2
                assert len({e.task_id for e in rollout.last_rollouts}) == 1  # one group
                for episode in rollout.last_rollouts:
                    row = client.get(f"/v1/rollouts/{episode.session_id}").json()
                    assert row["metadata"]["buffer_group"] and row["version_min"] >= step - 1
            state = client.get(f"/v1/policy-runs/{RUN}").json()
    finally:
        rollout.close()
        policy.stop()
    assert state["version"] == 2 and state["groups"]["consumed"] == 3


def test_async_agents_need_a_policy_server() -> None:
    with pytest.raises(ValueError, match="upstream"):
        AgentRolloutFunc("http://127.0.0.1:9", react_agent, max_staleness=1)
