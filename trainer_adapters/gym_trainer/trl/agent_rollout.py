"""TRL 1.x `rollout_func` for a user's own agent: each prompt is one gym episode the agent plays through
its episode gateway, and TRL trains on the tokens the gateway recorded.

`GRPOTrainer(..., rollout_func=AgentRolloutFunc(gym_url, agent))` hands the function each process's
prompts, already repeated `num_generations` times (consecutive copies form a group: same task, same gym
seed). For every prompt `play_agent_many` opens a session with a gateway, runs `await agent(episode)`
and reads back the episode's token-exact samples and reward; this returns, in prompt order,
`prompt_ids`, `completion_ids`, `logprobs`, `env_mask` and the extras `gym_reward` (None: no signal),
`gym_components`, `gym_failure`, `gym_session_id`, `gym_task_id`, `gym_samples`, `gym_masked_share`.
Prompts name their task as for `GymRolloutFunc` (`gym_prompt` / `load_gym_dataset`).

Upstream: by default the trainer's own model, served in-process by `ServedPolicy` (on-policy on a CPU,
`use_vllm=False`); pass `upstream=` a vLLM server for the GPU route (`use_vllm=True, vllm_mode="server"`
keeps its weights in sync). The agent chooses its own sampling parameters; `max_completion_length` is
enforced here by cutting the sample (TRL needs it).

One row per prompt: TRL keeps one sequence per prompt, so an episode split into several samples (a chat
template rewrote history) gives TRL its last sample, which holds the final answer; `gym_samples` says
how many there were. `AgentRollout.samples` (in `last_rollouts`) and ART's `additional_histories` keep
them all.

Asynchronous: `max_staleness=k` (k >= 1) runs the next steps' agents while this one trains, through the
gym's rollout buffer, as `GymRolloutFunc` does (`BufferedRollouts`); it needs a policy server
(`upstream=`): the in-process one serves weights the optimizer is writing. The gateway records on each
call the version the trainer announced.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gym_trainer._loop import BackgroundLoop
from gym_trainer.agents import AgentFn, AgentRollout, GatewayConfig, ServedPolicy
from gym_trainer.agents.runner import play_agent_many
from gym_trainer.buffered import BUFFER_GROUP_KEY, BufferedRollouts
from gym_trainer.chat import ChatRenderer
from gym_trainer.client import GymClient
from gym_trainer.episodes import EpisodeSpec
from gym_trainer.trl.columns import TrlRow, rollout_columns
from gym_trainer.trl.rollout import _groups, _plain, _spec

__all__ = ["AgentRolloutFunc"]


@dataclass
class AgentRolloutFunc:
    """A callable `rollout_func(prompts, trainer)` that trains a user's own agent.

    Args:
        gym_url: the gym server.
        agent: `async def agent(episode: AgentEpisode) -> None`, unchanged but for its base (and MCP) URL.
        env: the environment of prompts that do not name one.
        upstream: the policy endpoint the gateway forwards to; None: the trainer's model, served here.
        model: the model name agents send (the served name when the trainer's model is served here).
        run: the gym run trajectories are filed under.
        concurrency: episodes played at once.
        seed: base of the derived gym seeds.
        agent_timeout_s: wall-clock limit of one agent run.
        api_key: the gym's key, when it requires one (default `$GYM_API_KEY`).
        max_staleness: 0: synchronous; k >= 1: asynchronous, groups at most k steps old (needs
            `upstream`; `run` names the policy run, one is made up when None).
    """

    gym_url: str
    agent: AgentFn
    env: str | None = None
    upstream: str | None = None
    model: str = "trainer-policy"
    run: str | None = None
    concurrency: int = 16
    seed: int = 0
    agent_timeout_s: float | None = 600.0
    api_key: str | None = field(default=None, repr=False)
    max_staleness: int = 0
    last_rollouts: list[AgentRollout] = field(default_factory=list, repr=False)
    history: list[dict[str, Any]] = field(default_factory=list, repr=False)
    _loop: BackgroundLoop | None = field(default=None, repr=False)
    _gym: GymClient | None = field(default=None, repr=False)
    _policy: ServedPolicy | None = field(default=None, repr=False)
    _renderer: ChatRenderer | None = field(default=None, repr=False)
    _buffered: BufferedRollouts[AgentRollout] | None = field(default=None, repr=False)
    _config: GatewayConfig | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.max_staleness < 0:
            raise ValueError(f"max_staleness is a number of steps, at least 0; got {self.max_staleness}")
        if self.max_staleness and self.upstream is None:
            raise ValueError(
                "max_staleness > 0 samples while the trainer trains: give AgentRolloutFunc a policy server "
                "(upstream=...), not the trainer's own model served here"
            )
        if self.max_staleness and self.run is None:
            self.run = f"agent-async-{uuid.uuid4().hex[:12]}"

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        loop, gym = self._connect()
        tokenizer = getattr(trainer, "processing_class", None) or trainer.tokenizer
        if self._renderer is None:
            self._renderer = ChatRenderer(tokenizer)
        upstream = self.upstream
        if upstream is None:
            if self._policy is None:
                self._policy = ServedPolicy(trainer.model, tokenizer, name=self.model).start()
            upstream = self._policy.base_url
        step = int(trainer.state.global_step)
        config = GatewayConfig(
            upstream=upstream,
            model=self.model,
            run=self.run,
            agent_timeout_s=self.agent_timeout_s,
            weight_version=str(step),  # the adapter revision VLLMWeightSync loaded after step `step`
        )
        specs = []
        groups = _groups(prompts)
        for prompt, group in zip(prompts, groups, strict=True):
            specs.append(_spec(prompt, self.env, seed=self.seed * 1_000_003 + step * 1_009 + group))
        if self.max_staleness:
            rollouts = loop.run(self._buffered_step(gym, config, specs, groups, step))
        else:
            episodes = play_agent_many(
                gym, self.agent, specs, config, concurrency=self.concurrency, api_key=self.api_key
            )
            rollouts = loop.run(episodes)
        self.last_rollouts = rollouts
        scored = [r.reward for r in rollouts if r.reward is not None]
        self.history.append(
            {
                "step": step,
                "mean_reward": sum(scored) / len(scored) if scored else None,
                "failures": sum(1 for r in rollouts if r.reward is None),
            }
        )
        return self._to_trl(rollouts, prompts, int(trainer.args.max_completion_length))

    async def _buffered_step(
        self, gym: GymClient, config: GatewayConfig, specs: list[EpisodeSpec], groups: list[int], step: int
    ) -> list[AgentRollout]:
        """The asynchronous step (see `GymRolloutFunc._buffered_step`)."""
        self._config = config  # the agents started from now on use this step's gateway settings
        if self._buffered is None:
            assert self.run is not None  # made up in __post_init__
            self._buffered = BufferedRollouts(
                gym,
                self.run,
                max_staleness=self.max_staleness,
                play=self._play_group,
                concurrency=self.concurrency,
                policy=self.model,
            )
        return await self._buffered.step(step, specs, groups)

    async def _play_group(self, group_id: str, specs: Sequence[EpisodeSpec]) -> list[AgentRollout]:
        assert self._gym is not None and self._config is not None
        config = replace(self._config, metadata={BUFFER_GROUP_KEY: group_id})
        return await play_agent_many(
            self._gym, self.agent, specs, config, concurrency=len(specs), api_key=self.api_key
        )

    def _connect(self) -> tuple[BackgroundLoop, GymClient]:
        if self._loop is None or self._gym is None:
            self._loop = BackgroundLoop("gym-agent-rollouts")
            self._gym = self._loop.run(_client(self.gym_url, self.api_key))
        return self._loop, self._gym

    def _to_trl(
        self, rollouts: Sequence[AgentRollout], prompts: Sequence[Any], max_length: int
    ) -> dict[str, list[Any]]:
        assert self._renderer is not None
        rows = []
        for rollout, prompt in zip(rollouts, prompts, strict=True):
            sample = rollout.samples[-1] if rollout.samples else None
            if sample is not None and sample.model_tokens:
                prompt_ids = sample.prompt_ids
                completion_ids = sample.completion_ids[:max_length]
                logprobs, mask = sample.logprobs[:max_length], sample.mask[:max_length]
            else:  # no recorded tokens: the opening prompt, and rollout_columns' masked end-of-turn
                prompt_ids = self._renderer.render_prompt(rollout.prompt or _plain(prompt)).ids
                completion_ids, logprobs, mask = [], [], []
            extra = {"gym_samples": len(rollout.samples), "gym_masked_share": rollout.masked_share}
            rows.append(TrlRow(prompt_ids, completion_ids, logprobs, mask, rollout, extra))
        return rollout_columns(rows, eos=self._renderer.primary_eos_id)

    def close(self) -> None:
        """Close the gym connection, the sampling thread and the in-process policy server."""
        if self._loop is not None and self._gym is not None:
            if self._buffered is not None:
                self._loop.run(self._buffered.aclose())
            self._loop.run(self._gym.aclose())
            self._loop.stop()
        if self._policy is not None:
            self._policy.stop()
        self._loop = self._gym = self._policy = self._buffered = None


async def _client(url: str, api_key: str | None) -> GymClient:
    return GymClient(url, api_key=api_key)
