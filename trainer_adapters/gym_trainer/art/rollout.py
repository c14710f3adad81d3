"""ART rollouts as gym episodes: `gym_rollout` plays one session with the ART model's OpenAI-compatible
client and returns an `art.Trajectory`; `gym_trajectory_groups` gathers groups the way ART does.

ART's own loop is `await art.gather_trajectory_groups(art.TrajectoryGroup(rollout(model, scenario) for _ in
range(n)) for scenario in scenarios)`, then `await model.train(groups)`. Here the scenario is a gym
`EpisodeSpec`. Each turn asks `model.openai_client()` for a chat completion with the session's tools
(`model.get_inference_name()` as the model, logprobs on); the returned `Choice` goes into
`messages_and_choices` verbatim (it is what ART trains on), the assistant message is stepped in the gym,
and the environment's replies follow as plain messages. A server that returns tool calls as text (no
tool parser) is read with the gym's own parser. The reward is the gym verifier's; `metrics` carry the
turns, parse errors and reward components, `metadata` the session, task and how the episode ended.

**No signal.** An `art.Trajectory` must carry a float reward, and ART's way of saying "this rollout gave
nothing to learn from" is an exception: `TrajectoryGroup` keeps exceptions apart from trajectories
(`group.exceptions`), and `gather_trajectory_groups(..., max_exceptions=...)` lets a batch go on past
them. So an episode that fails (the gym unreachable or refusing, the policy failing, the verifier
failing) raises `GymEpisodeFailed`, with the failure class, the session and the partial trajectory
(its `metadata["gym_failure"]` set), instead of returning a reward of 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import art

from gym_trainer.client import GymAPIError, GymClient, GymClientError, SessionInfo
from gym_trainer.episodes import CLIENT_FAILURES, EpisodeSpec
from gym_trainer.toolcalls import parse_tool_calls

__all__ = ["GymEpisodeFailed", "GymRolloutConfig", "gym_rollout", "gym_trajectory_groups"]


class GymEpisodeFailed(Exception):
    """An episode without a reward ("no signal"); ART records it in `TrajectoryGroup.exceptions`."""

    def __init__(self, failure: str, error: str, trajectory: art.Trajectory) -> None:
        super().__init__(f"{failure}: {error}")
        self.failure = failure
        self.error = error
        self.trajectory = trajectory


@dataclass(frozen=True, slots=True)
class GymRolloutConfig:
    """How episodes are played.

    Args:
        max_turns: assistant turns per episode (the gym may end it sooner).
        completion: extra arguments of every chat completion (`max_tokens`, `temperature`, ...).
        run: the gym `run` trajectories are filed under.
        ttl_s: idle TTL of each session (the gym's default when None).
        return_token_ids: ask the server for the sampled token ids (vLLM's and the gym's policy
            server's `return_token_ids`), stored with each gym step.
    """

    max_turns: int = 8
    completion: dict[str, Any] = field(default_factory=lambda: {"max_tokens": 256, "temperature": 1.0})
    run: str | None = None
    ttl_s: float | None = None
    return_token_ids: bool = True


def _message_of(choice: Any, turn: int) -> tuple[dict[str, Any], str | None]:
    """The assistant message to step the gym with, and the tool-call parse error if any."""
    message = choice.message
    if message.tool_calls:
        calls = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.function.name, "arguments": c.function.arguments},
            }
            for c in message.tool_calls
        ]
        return {"role": "assistant", "content": message.content, "tool_calls": calls}, None
    parsed = parse_tool_calls(message.content or "", call_id_prefix=f"t{turn}_")
    return parsed.to_message(), parsed.error


def _turn_data(choice: Any, turn: int) -> dict[str, Any] | None:
    """The sampled ids and logprobs, when the server returned ids (stored with the gym's step)."""
    ids = getattr(choice, "token_ids", None)
    if not ids:
        return None
    data: dict[str, Any] = {"turn": turn, "completion_ids": list(ids), "finish_reason": choice.finish_reason}
    if choice.logprobs is not None and choice.logprobs.content:
        data["logprobs"] = [entry.logprob for entry in choice.logprobs.content]
    return data


class _Episode:
    """One session and the trajectory being built for it."""

    def __init__(self, model: art.Model, gym: GymClient, spec: EpisodeSpec, config: GymRolloutConfig) -> None:
        self.model, self.gym, self.spec, self.config = model, gym, spec, config
        self.session: SessionInfo | None = None
        self.trajectory = art.Trajectory(
            messages_and_choices=[],
            reward=0.0,
            metrics={"gym_turns": 0, "gym_parse_errors": 0},
            metadata={
                "gym_env": spec.env,
                "gym_task_id": spec.task_id,
                "gym_seed": spec.seed,
                "gym_failure": None,
            },
        )

    async def play(self) -> art.Trajectory:
        try:
            self.session = await self.gym.create_session(
                self.spec.env,
                task_id=self.spec.task_id,
                task=self.spec.task,
                seed=self.spec.seed,
                ttl_s=self.config.ttl_s,
                run=self.config.run,
                policy={"kind": "art", "model": self.model.get_inference_name()},
            )
        except GymClientError as exc:
            raise self._failed("gym_error", exc) from exc
        self.trajectory.metadata.update(
            gym_session_id=self.session.session_id, gym_task_id=self.session.task_id
        )
        self.trajectory.tools = list(self.session.tools) or None
        self.trajectory.messages_and_choices.extend(self.session.messages)
        try:
            stop_reason = await self._turns(self.session)
            verdict = await self.gym.verify(self.session.session_id)
        except GymClientError as exc:
            await self._close(None)
            raise self._failed("gym_error", exc) from exc
        except Exception as exc:  # the policy's client: HTTP errors, timeouts, malformed answers
            await self._close("policy_error")
            raise self._failed("policy_error", exc) from exc
        await self._close(None)
        self.trajectory.metadata["gym_stop_reason"] = stop_reason
        if verdict.failure:  # the verifier failed: no signal either
            raise self._failed(verdict.failure, RuntimeError(str(verdict.info)[:300]))
        self.trajectory.reward = verdict.reward
        self.trajectory.metrics.update({f"gym_{name}": value for name, value in verdict.components.items()})
        return self.trajectory.finish()

    async def _turns(self, session: SessionInfo) -> str:
        client = self.model.openai_client()
        messages: list[dict[str, Any]] = list(session.messages)
        extra_body = {"return_token_ids": True} if self.config.return_token_ids else None
        for turn in range(self.config.max_turns):
            completion = await client.chat.completions.create(
                model=self.model.get_inference_name(),
                messages=messages,
                tools=session.tools or None,
                logprobs=True,
                extra_body=extra_body,
                **self.config.completion,
            )
            choice = completion.choices[0]
            self.trajectory.messages_and_choices.append(choice)
            self.trajectory.metrics["gym_turns"] = turn + 1
            message, parse_error = _message_of(choice, turn)
            turn_data = _turn_data(choice, turn)
            if choice.finish_reason == "length":
                # Cut mid-turn: the environment never sees half a message; the state is scored as is.
                await self.gym.record_truncated_turn(
                    session.session_id, choice.message.content or "", turn_data
                )
                return "max_completion_tokens"
            if parse_error:
                self.trajectory.metrics["gym_parse_errors"] = (
                    int(self.trajectory.metrics["gym_parse_errors"]) + 1
                )
                if turn_data is not None:
                    turn_data["parse_error"] = parse_error
            result = await self.gym.step(session.session_id, message, turn_data)
            messages += [message, *result.messages]
            self.trajectory.messages_and_choices.extend(result.messages)
            if result.done:
                return "done"
        return "max_turns"

    def _failed(self, failure: str, exc: BaseException) -> GymEpisodeFailed:
        error = f"{type(exc).__name__}: {exc}"[:500]
        self.trajectory.metadata.update(gym_failure=failure, gym_error=error, gym_stop_reason=failure)
        return GymEpisodeFailed(failure, error, self.trajectory)

    async def _close(self, failure: str | None) -> None:
        if self.session is None:
            return
        try:
            await self.gym.close(
                self.session.session_id, failure=failure if failure in CLIENT_FAILURES else None
            )
        except GymAPIError as exc:
            if exc.status not in (404, 410):
                self.trajectory.logs.append(f"close failed: {exc}")
        except GymClientError as exc:
            self.trajectory.logs.append(f"close failed: {exc}")


async def gym_rollout(
    model: art.Model, gym: GymClient, spec: EpisodeSpec, config: GymRolloutConfig | None = None
) -> art.Trajectory:
    """Play one gym episode with `model`'s OpenAI-compatible client.

    Raises:
        GymEpisodeFailed: the episode has no reward (its `failure` says why); inside an
            `art.TrajectoryGroup` it becomes one of the group's `exceptions`.
    """
    return await _Episode(model, gym, spec, config or GymRolloutConfig()).play()


async def gym_trajectory_groups(
    model: art.Model,
    gym: GymClient,
    specs: Iterable[EpisodeSpec],
    group_size: int,
    config: GymRolloutConfig | None = None,
    *,
    max_exceptions: int | float = 1.0,
    pbar_desc: str | None = "gym",
) -> list[art.TrajectoryGroup]:
    """`group_size` episodes of each spec (same task and gym seed), gathered by ART's
    `gather_trajectory_groups`; failed episodes land in each group's `exceptions` (`max_exceptions`: how
    many, or which fraction, the batch tolerates before ART raises)."""
    return list(
        await art.gather_trajectory_groups(
            (
                art.TrajectoryGroup(gym_rollout(model, gym, spec, config) for _ in range(group_size))
                for spec in specs
            ),
            pbar_desc=pbar_desc,
            max_exceptions=max_exceptions,
        )
    )
