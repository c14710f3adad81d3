"""`GymAgentLoop`: a verl agent loop that plays each sample as one token-exact gym episode.

verl's `AgentLoopWorker` instantiates the class named by a sample's `agent_name` once per sample (with
hydra: the keys of the agent-loop config entry, besides `name` and `_target_`, arrive as keyword
arguments) and awaits `run(sampling_params, **dataset_fields)`. Here `run`:

1. reads the task from the row's `extra_info` (`gym_env`, `gym_task_id` or `gym_task`, `gym_seed`);
   the episode's real opening messages and tools come from the gym session, not from `raw_prompt`;
2. plays the episode with the gym's `RolloutDriver`, sampling through verl's own server manager
   (`ServerManagerSampler`: token ids in, token ids and logprobs out) and rendering with verl's
   tokenizer; tool calls are parsed from each turn (`toolcalls.parse_tool_calls`), the gym is stepped,
   and its replies are appended as template tokens with mask 0;
3. returns verl's `AgentLoopOutput`: `prompt_ids`, `response_ids` (model and environment tokens),
   `response_mask` (1 on sampled tokens), `response_logprobs` (0.0 on environment tokens) and
   `reward_score` = the gym's verifier reward, so verl's reward function is not called for it.

No signal: an episode that fails (the gym unreachable or dying, the policy erroring, the verifier
failing) has no reward. verl 0.9.1 has no per-sample exclusion flag, so the convention is:
`reward_score=None`, every `response_mask` entry 0 (no token of it can enter the policy loss, whatever
verl later assigns it), and `extra_fields["gym_no_signal"] = True` with `gym_failure` (the class) and
`gym_error`. The batch goes on; the loop never raises for one episode's failure. It does raise for a
configuration error that would spoil every sample: a tokenizer that is not the served model's
(`TokenizerMismatch`) or a prompt longer than `rollout.prompt_length`.
"""

from __future__ import annotations

import json
import os
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register

from gym_trainer.chat import ChatRenderer
from gym_trainer.client import GymClient
from gym_trainer.driver import DriverConfig, EpisodeSpec, Rollout, RolloutDriver
from gym_trainer.samplers.base import SamplingParams
from gym_trainer.verl.sampler import ServerManagerSampler, TokenizerMismatch

__all__ = ["AGENT_NAME", "GymAgentLoop", "episode_spec", "output_fields"]

AGENT_NAME = "gym_agent"


def episode_spec(extra_info: dict[str, Any] | None, default_env: str | None) -> EpisodeSpec:
    """The gym task a dataset row names (its `extra_info`), or the loop's default environment."""
    info = dict(extra_info or {})
    env = info.get("gym_env") or default_env
    if not env:
        raise ValueError("the row's extra_info has no gym_env and the agent loop config no env")
    task = info.get("gym_task")
    seed = info.get("gym_seed")
    return EpisodeSpec(
        env=str(env),
        task_id=info.get("gym_task_id"),
        task=json.loads(task) if isinstance(task, str) else task,
        seed=None if seed is None else int(seed),
    )


def output_fields(rollout: Rollout, response_length: int) -> dict[str, Any]:
    """The fields of verl's `AgentLoopOutput` for a played episode (a failed one: see the module doc)."""
    no_signal = rollout.failure is not None or rollout.reward is None
    mask = rollout.env_mask[:response_length]
    return {
        "prompt_ids": list(rollout.prompt_ids),
        "response_ids": rollout.completion_ids[:response_length],
        "response_mask": [0] * len(mask) if no_signal else mask,
        "response_logprobs": rollout.logprobs[:response_length],
        "reward_score": None if no_signal else rollout.reward,
        "num_turns": sum(1 for message in rollout.transcript if message.get("role") != "system"),
        "extra_fields": {
            "gym_session_id": rollout.session_id,
            "gym_task_id": rollout.task_id,
            "gym_reward": rollout.reward,
            "gym_components": dict(rollout.components),
            "gym_failure": rollout.failure,
            "gym_error": rollout.error,
            "gym_no_signal": no_signal,
            "gym_stop_reason": rollout.stop_reason,
            "turn_scores": [],
            "tool_rewards": [],
        },
    }


@register(AGENT_NAME)
class GymAgentLoop(AgentLoopBase):  # type: ignore[misc]  # verl is untyped
    """One gym episode per sample (see the module doc).

    Args (besides verl's own, from the agent-loop config entry):
        gym_url: the gym's base URL (default: `$GYM_URL`, else http://127.0.0.1:8000).
        env: the environment of rows whose `extra_info` names none.
        max_turns: assistant turns per episode (the gym may end it sooner).
        max_tokens_per_turn: cap on one turn (default: `rollout.response_length`, the episode budget).
        run: the gym `run` the trajectories are filed under.
        api_key: the gym key (default: `$GYM_API_KEY`).
        ttl_s: the session's idle TTL.
    """

    def __init__(
        self,
        *args: Any,
        gym_url: str | None = None,
        env: str | None = None,
        max_turns: int = 8,
        max_tokens_per_turn: int | None = None,
        run: str | None = None,
        api_key: str | None = None,
        ttl_s: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.gym_url = gym_url or os.environ.get("GYM_URL", "http://127.0.0.1:8000")
        self.default_env = env
        self.max_turns = int(max_turns)
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)
        self.max_tokens_per_turn = int(max_tokens_per_turn or self.response_length)
        self.run_name = run
        self.api_key = api_key  # None: GymClient sends $GYM_API_KEY
        self.ttl_s = ttl_s
        self.renderer = ChatRenderer(self.tokenizer)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        spec = episode_spec(kwargs.get("extra_info"), self.default_env)
        model = str(self.config.actor_rollout_ref.model.get("path", "verl"))
        sampler = ServerManagerSampler(
            self.server_manager, uuid4().hex, len(self.tokenizer), sampling_params, model=model
        )
        temperature = float(sampling_params.get("temperature", 1.0))
        top_p = float(sampling_params.get("top_p", 1.0))
        config = DriverConfig(
            max_completion_tokens=self.response_length,
            max_turns=self.max_turns,
            sampling=SamplingParams(self.max_tokens_per_turn, temperature, top_p if top_p > 0 else 1.0),
            run=self.run_name,
            ttl_s=self.ttl_s,
        )
        async with GymClient(self.gym_url, api_key=self.api_key) as gym:
            rollout = await RolloutDriver(gym, sampler, self.renderer, config).run_episode(spec)
        if rollout.failure == TokenizerMismatch.failure:
            raise TokenizerMismatch(rollout.error or "tokenizer mismatch")
        if not rollout.prompt_ids or not rollout.completion_ids:
            # No episode to keep (the gym was down before the first turn): a one-token stand-in with
            # mask 0, so verl's padding has a row, and no signal.
            rollout.prompt_ids = rollout.prompt_ids or self.renderer.render_prompt(kwargs["raw_prompt"]).ids
            rollout.completion_ids, rollout.logprobs = [self.renderer.primary_eos_id], [0.0]
            rollout.env_mask = [0]
        if len(rollout.prompt_ids) > self.prompt_length:
            raise ValueError(
                f"the gym's opening messages are {len(rollout.prompt_ids)} tokens, more than "
                f"actor_rollout_ref.rollout.prompt_length={self.prompt_length}: raise it (verl would "
                "truncate the prompt, and the episode would no longer be token-exact)"
            )
        fields = output_fields(rollout, self.response_length)
        timings = rollout.timings
        metrics = AgentLoopMetrics(
            generate_sequences=timings["sample_ms"] / 1000, tool_calls=timings["env_ms"] / 1000
        )
        return AgentLoopOutput(**fields, metrics=metrics)
