"""A user's own agent run as gym episodes (`trainer_adapters.agents`, `trl.AgentRolloutFunc`): a real gym
server process, the tiny model served in-process by `ServedPolicy`, and an agent that knows only the two
URLs its episode hands it (tests/react_agent.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import ServerProcess

pytest.importorskip("openai")
pytest.importorskip("mcp")
pytest.importorskip("transformers")

from react_agent import react_agent

from gym_trainer.agents import (
    AgentEpisode,
    GatewayConfig,
    ServedPolicy,
    play_agent,
)
from gym_trainer.client import GymClient
from gym_trainer.episodes import EpisodeSpec
from gym_trainer.trl import AgentRolloutFunc, gym_prompt


@pytest.fixture
def gym(server_factory: Callable[..., ServerProcess], tmp_path: Path) -> ServerProcess:
    server = server_factory(f"sqlite:///{tmp_path / 'gym.db'}", GYM_LOG_LEVEL="warning")
    server.start(timeout_s=120)  # a loaded 2-core machine starts a server slowly
    return server


def _trainer(model: Any, tokenizer: Any, max_completion_length: int) -> Any:
    """What `rollout_func` reads of a `GRPOTrainer`."""
    return SimpleNamespace(
        model=model,
        processing_class=tokenizer,
        state=SimpleNamespace(global_step=0),
        args=SimpleNamespace(max_completion_length=max_completion_length),
    )


def test_the_rollout_func_hands_trl_the_policys_own_tokens_and_the_gyms_reward(
    gym: ServerProcess, tiny_model: Any, tiny_tokenizer: Any
) -> None:
    import torch

    rollout = AgentRolloutFunc(gym.url, react_agent, run="agents-test")
    prompts = [gym_prompt("counter", "play", task_id="counter-0000", seed=3)] * 2
    try:
        out = rollout(prompts, _trainer(tiny_model, tiny_tokenizer, 48))
    finally:
        rollout.close()
    assert len(out["prompt_ids"]) == 2
    for i, episode in enumerate(rollout.last_rollouts):
        assert episode.failure is None and episode.reward is not None, episode.error
        assert out["gym_reward"][i] == episode.reward
        assert episode.token_exact and episode.num_calls >= 1
        assert out["gym_samples"][i] == len(episode.samples)
        ids, logprobs, mask = out["completion_ids"][i], out["logprobs"][i], out["env_mask"][i]
        assert len(ids) == len(logprobs) == len(mask) <= 48 and mask[0] == 1
        # The logprobs are the trainer's model's own: what GRPO's ratio starts from.
        with torch.no_grad():
            logits = tiny_model(torch.tensor([out["prompt_ids"][i] + ids])).logits[0]
        recomputed = torch.log_softmax(logits.float(), dim=-1)
        offset = len(out["prompt_ids"][i]) - 1
        for k, (token, lp, m) in enumerate(zip(ids, logprobs, mask, strict=True)):
            if m:
                assert float(recomputed[offset + k, token]) == pytest.approx(lp, abs=1e-3)
            else:
                assert lp == 0.0
    # One group: same task and gym seed, two episodes.
    assert len({e.session_id for e in rollout.last_rollouts}) == 2
    assert len({e.task_id for e in rollout.last_rollouts}) == 1


async def test_an_agent_that_raises_is_no_signal_and_its_episode_is_closed(
    gym: ServerProcess, tiny_model: Any, tiny_tokenizer: Any
) -> None:
    seen: list[AgentEpisode] = []

    async def broken(episode: AgentEpisode) -> None:
        seen.append(episode)
        raise RuntimeError("the agent's own bug")

    with ServedPolicy(tiny_model, tiny_tokenizer, name="tiny") as policy:
        async with GymClient(gym.url) as client:
            config = GatewayConfig(upstream=policy.base_url, model="tiny")
            result = await play_agent(client, broken, EpisodeSpec("counter", task_id="counter-0000"), config)
            row = await client.wait_for_rollout(result.session_id or "")
    assert result.reward is None and result.failure == "policy_error"
    assert result.error == "RuntimeError: the agent's own bug"
    assert row["status"] != "live" and row["failure"] == "policy_error"
    (episode,) = seen
    assert episode.base_url.endswith(f"/v1/sessions/{episode.session_id}/openai/v1")
    assert episode.mcp_url.endswith(f"/v1/sessions/{episode.session_id}/mcp")
    assert episode.prompt and episode.tools and episode.model == "tiny"


async def test_an_unknown_model_name_is_the_first_one_the_gateway_lists(
    gym: ServerProcess, tiny_model: Any, tiny_tokenizer: Any
) -> None:
    names: list[str] = []

    async def agent(episode: AgentEpisode) -> None:
        names.append(episode.model)
        await asyncio.sleep(0)

    with ServedPolicy(tiny_model, tiny_tokenizer, name="served-tiny") as policy:
        async with GymClient(gym.url) as client:
            config = GatewayConfig(upstream=policy.base_url)
            result = await play_agent(client, agent, EpisodeSpec("counter", task_id="counter-0000"), config)
    assert names == ["served-tiny"]
    # The agent never answered: nothing to score, and no samples.
    assert result.samples == [] and result.num_calls == 0
