"""`GymRolloutFunc(max_staleness=k)`: TRL's rollout function over the gym's rollout buffer, against a
real gym server: every step announces its version and gets whole groups no more than k versions old,
while the producer plays ahead of the trainer (bounded by the gym's admission)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from conftest import ServerProcess

from gym_trainer.toolcalls import render_tool_call
from gym_trainer.trl import GymRolloutFunc, gym_prompt

pytestmark = pytest.mark.slow

RUN = "trl-async-test"


@pytest.fixture
def gym_url(server_factory: Callable[..., ServerProcess], tmp_path: Path) -> str:
    server = server_factory(f"sqlite:///{tmp_path / 'gym.db'}", GYM_LOG_LEVEL="warning")
    server.start()
    return server.url


def trainer_at(tokenizer: Any, step: int) -> Any:
    args = SimpleNamespace(max_completion_length=48, temperature=1.0, top_p=1.0)
    return SimpleNamespace(args=args, state=SimpleNamespace(global_step=step), processing_class=tokenizer)


def test_async_steps_get_whole_groups_within_the_bound(
    gym_url: str, tiny_tokenizer: Any, scripted: Any
) -> None:
    sampler = scripted(tiny_tokenizer, [render_tool_call("submit", {})] * 2000)
    rollout = GymRolloutFunc(
        gym_url, sampler=sampler, max_turns=2, run=RUN, concurrency=6, max_staleness=1, seed=5
    )
    tasks = ["counter-0000", "counter-0001", "counter-0002", "counter-0003"]
    stored_versions: list[tuple[int, int]] = []
    try:
        with httpx.Client(base_url=gym_url) as gym:
            for step in range(4):
                prompts = [gym_prompt("counter", "?", task_id=tasks[step])] * 3 + [
                    gym_prompt("counter", "?", task_id=tasks[(step + 1) % 4])
                ] * 3
                out = rollout(prompts, trainer_at(tiny_tokenizer, step))
                assert all(len(values) == 6 for values in out.values())
                episodes = rollout.last_rollouts
                for first in (0, 3):  # two whole groups: one task and one gym seed each
                    group = episodes[first : first + 3]
                    assert len({(e.task_id, e.seed) for e in group}) == 1
                assert all(reward is not None for reward in out["gym_reward"])
                for episode in episodes:
                    row = gym.get(f"/v1/rollouts/{episode.session_id}").json()
                    assert row["metadata"]["buffer_group"]
                    # driver turns record the version that sampled them: none older than the bound
                    assert row["version_min"] >= step - 1, (step, row["version_min"])
                    stored_versions.append((step, row["version_min"]))
                # "training": until the producer has played as far ahead as the gym admits
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    groups = gym.get(f"/v1/policy-runs/{RUN}").json()["groups"]
                    if groups["open"] == 0 and sum(groups.values()) - groups["stale"] == (step + 2) * 2:
                        break
                    time.sleep(0.1)
            state = gym.get(f"/v1/policy-runs/{RUN}").json()
    finally:
        rollout.close()
    assert state["version"] == 3 and state["groups"]["consumed"] == 8
    # the producer played ahead of the trainer (each step after the first got groups sampled under the
    # version before), no further than the admission rule allows
    admitted = sum(state["groups"][name] for name in ("open", "ready", "leased", "consumed"))
    assert admitted == state["admit_limit"] == (3 + 1 + 1) * 2
    assert {step for step, version in stored_versions if version == step - 1} == {1, 2, 3}


def test_a_negative_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 0"):
        GymRolloutFunc("http://127.0.0.1:9", max_staleness=-1)
