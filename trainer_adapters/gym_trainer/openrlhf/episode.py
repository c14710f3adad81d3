"""One gym session played by OpenRLHF's multi-turn loop: `GymEpisode` holds its state, and
`GymAgentInstance` is the `AgentInstanceBase` OpenRLHF's `MultiTurnAgentExecutor` drives.

The loop (OpenRLHF's own, unchanged) is text-in at the edges and token-exact in the middle: it
tokenizes the observation `reset` returns, appends the engine's sampled token ids verbatim, and
tokenizes each `environment_feedback` `step` returns. So `reset` returns the session's opening messages
rendered by the policy's chat template, and `step` returns the environment's replies as the template's
*delta* (`ChatRenderer.render_delta`): the text between the model's end-of-turn token and the next
assistant header. Tokenized alone, each piece gives exactly the ids a full render would, so the
sequence OpenRLHF trains on is prompt + model tokens + environment tokens, with the action ranges (its
loss mask) on the model tokens only.

A failure (the gym unreachable or refusing, a session lost) ends the episode at once with `failure`
set and no reward: the executor turns that into OpenRLHF's "no signal" (see `executor`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from openrlhf.utils.agent import AgentInstanceBase

from gym_trainer.chat import ChatRenderer
from gym_trainer.client import GymAPIError, GymClient, GymClientError, SessionInfo
from gym_trainer.episodes import CLIENT_FAILURES, EpisodeSpec
from gym_trainer.openrlhf.label import parse_label
from gym_trainer.openrlhf.settings import AgentSettings
from gym_trainer.toolcalls import parse_tool_calls

__all__ = ["GymAgentInstance", "GymEpisode", "Sample"]


@dataclass(frozen=True, slots=True)
class Sample:
    """What the engine sampled for one turn: ids, their logprobs (when asked for), why it stopped."""

    token_ids: list[int]
    logprobs: list[float] | None
    finish_reason: str


@dataclass
class GymEpisode:
    """The state of one episode, shared by the agent instance (which steps the gym) and the engine
    wrapper (which records what was sampled), both created per OpenRLHF `execute` call."""

    gym: GymClient
    renderer: ChatRenderer
    settings: AgentSettings
    policy: dict[str, Any] = field(default_factory=dict)
    spec: EpisodeSpec | None = None
    session: SessionInfo | None = None
    prompt_ids: list[int] = field(default_factory=list)
    env_ids: list[int] = field(default_factory=list)
    last: Sample | None = None
    turns: int = 0
    parse_errors: int = 0
    reward: float | None = None
    components: dict[str, float] = field(default_factory=dict)
    failure: str | None = None
    error: str | None = None
    stop_reason: str | None = None

    @property
    def finished(self) -> bool:
        return self.stop_reason is not None

    def fail(self, failure: str, exc: BaseException) -> None:
        self.failure, self.stop_reason, self.reward = failure, failure, None
        self.error = f"{type(exc).__name__}: {exc}"[:500]

    async def open(self, label: Any) -> str:
        """Open the session the label names; the opening messages rendered as the prompt text."""
        self.spec = parse_label(label)  # a bad label is a dataset bug: it raises, loudly
        try:
            self.session = await self.gym.create_session(
                self.spec.env,
                task_id=self.spec.task_id,
                task=self.spec.task,
                seed=self.spec.seed,
                ttl_s=self.settings.ttl_s,
                run=self.settings.run,
                policy=self.policy,
            )
        except GymClientError as exc:
            self.fail("gym_error", exc)
            return ""
        rendered = self.renderer.render_prompt(self.session.messages, self.session.tools)
        self.prompt_ids = rendered.ids
        return rendered.text

    async def play(self, sample: Sample) -> tuple[str, bool]:
        """Step the gym with one sampled turn: the environment's feedback text and whether it ended."""
        if self.session is None or self.finished:
            return "", True  # opening failed: nothing to step, the episode carries no signal
        turn, ids = self.turns, sample.token_ids
        self.turns += 1
        text = self.renderer.completion_text(ids)
        ended = bool(ids) and ids[-1] in self.renderer.eos_token_ids
        turn_data: dict[str, Any] = {
            "turn": turn,
            "env_ids": self.env_ids,
            "completion_ids": ids,
            "finish_reason": sample.finish_reason if ended else "length",
        }
        if sample.logprobs is not None:
            turn_data["logprobs"] = sample.logprobs
        if turn == 0:
            turn_data["prompt_ids"] = self.prompt_ids
        try:
            if not ended:
                # Cut mid-turn by the length budget: the environment never sees half a message; the
                # store still gets the tokens, and the state is scored as it is.
                await self.gym.record_truncated_turn(self.session.session_id, text, turn_data)
                await self.finish("max_completion_tokens")
                return "", True
            parsed = parse_tool_calls(text, call_id_prefix=f"t{turn}_")
            self.parse_errors += parsed.error is not None
            if parsed.error:
                turn_data["parse_error"] = parsed.error
            result = await self.gym.step(self.session.session_id, parsed.to_message(), turn_data)
        except GymClientError as exc:
            self.fail("gym_error", exc)
            await self.close()
            return "", True
        if result.done or self.turns >= self.settings.max_turns:
            await self.finish("done" if result.done else "max_turns")
            return "", True
        feedback = self.renderer.render_delta(result.messages)
        self.env_ids = feedback.ids
        return feedback.text, False

    async def finish(self, stop_reason: str) -> None:
        """Score and close (once); OpenRLHF's length budget can end the loop without a last step."""
        if self.finished or self.session is None:
            return
        self.stop_reason = stop_reason
        try:
            verdict = await self.gym.verify(self.session.session_id)
        except GymClientError as exc:
            self.fail("gym_error", exc)
        else:
            self.reward, self.components = verdict.reward, verdict.components
            if verdict.failure:  # the verifier itself failed: no signal either
                self.failure, self.reward = verdict.failure, None
        await self.close()

    async def close(self) -> None:
        if self.session is None:
            return
        try:
            reported = self.failure if self.failure in CLIENT_FAILURES else None
            await self.gym.close(self.session.session_id, failure=reported)
        except GymAPIError as exc:
            if exc.status not in (404, 410):  # already gone: nothing left to close
                self.error = self.error or f"close failed: {exc}"
        except GymClientError as exc:
            self.error = self.error or f"close failed: {exc}"


class GymAgentInstance(AgentInstanceBase):  # type: ignore[misc]  # OpenRLHF's base is untyped
    """One gym session as OpenRLHF's agent instance: `reset` opens it, `step` plays one turn.

    `step` returns OpenRLHF's keys: `rewards` (a tensor: the gym's reward on the last step, 0 before;
    OpenRLHF sums them), `scores`, `environment_feedback` (the template delta), `done`,
    `sampling_params` and `extra_logs`.
    """

    def __init__(self, episode: GymEpisode) -> None:
        self.episode = episode

    async def reset(self, states: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        text = await self.episode.open(states["label"])
        return {**states, "observation": text or str(states["observation"])}

    async def step(self, states: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        sample = self.episode.last
        if sample is None:
            raise RuntimeError("step before any generation: the engine wrapper recorded no sample")
        feedback, done = await self.episode.play(sample)
        reward = self.episode.reward if done and self.episode.reward is not None else 0.0
        return {
            "rewards": torch.tensor(reward),
            "scores": torch.tensor(reward),
            "environment_feedback": feedback,
            "done": done,
            "sampling_params": states["sampling_params"],
            "extra_logs": {},
        }
