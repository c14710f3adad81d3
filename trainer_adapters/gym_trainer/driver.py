"""The rollout driver: one policy, one gym session, one token-exact episode.

For a token sampler, an episode is:

1. open a session for (task, seed) and render its opening messages and tools once with the policy's
   chat template: `prompt_ids`;
2. sample a turn from `prompt_ids + completion_ids` with stop = the end-of-turn token; keep the ids
   and logprobs verbatim (loss mask 1);
3. parse tool calls from the turn's text and step the session with the assistant message, sending the
   turn's tokens as `turn_data` (stored with the trajectory);
4. unless the step ended the episode, append the replies as a template *delta* (loss mask 0, logprob
   0.0) and go to 2.

A turn cut before its end-of-turn token (per-turn `max_tokens` or the episode's budget) is not sent as a
step: the environment never sees a half message, and the episode is scored on the state it is in. Its
text and tokens go to the gym's `truncated-turn` route instead, so the stored `turns` still rebuild
every completion token the trainer gets.

Endings (`stop_reason`): `done` (the environment ended it; the last token is the model's end-of-turn
token), `max_turns`, `max_completion_tokens` (the budget, counted over model and environment tokens
like TRL's `max_completion_length`, ran out, or a turn was cut), `policy_error`, `policy_timeout`,
`gym_error`. The last three carry `failure`: the reward is `None` ("no signal"; TRL then gives the
sample no advantage), and the session is closed with that failure class so the stored trajectory
says so. A malformed tool call is not a failure: its raw text goes to the environment as a plain
message and is scored like any answer (`parse_errors` counts them).

Groups: `run_group` plays n episodes of one task with the same gym seed (same start state), each with
its own sampling seed, concurrently; concurrent episodes share the sampler's batches.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

from gym_trainer.chat import Renderer
from gym_trainer.client import (
    GymAPIError,
    GymClientError,
    SessionInfo,
    StepResult,
    VerifyResult,
)
from gym_trainer.episodes import (
    CLIENT_FAILURES,
    DriverConfig,
    EpisodeSpec,
    Rollout,
    summarize,
)
from gym_trainer.samplers.base import (
    ChatSampler,
    PolicyError,
    SamplingParams,
    TokenSampler,
)
from gym_trainer.toolcalls import ToolCallParser

__all__ = [
    "CLIENT_FAILURES",
    "DriverConfig",
    "EpisodeSpec",
    "GymBackend",
    "Rollout",
    "RolloutDriver",
    "summarize",
]

T = TypeVar("T")


class GymBackend(Protocol):
    """The session API the driver needs: `GymClient` over HTTP, or the server's own manager."""

    async def create_session(
        self,
        env: str,
        *,
        task_id: str | None = None,
        task: dict[str, Any] | None = None,
        seed: int | None = None,
        ttl_s: float | None = None,
        run: str | None = None,
        policy: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> SessionInfo: ...

    async def step(
        self, session_id: str, message: dict[str, Any], turn_data: dict[str, Any] | None = None
    ) -> StepResult: ...

    async def record_truncated_turn(
        self, session_id: str, content: str, turn_data: dict[str, Any] | None = None
    ) -> dict[str, Any]: ...

    async def verify(self, session_id: str) -> VerifyResult: ...

    async def close(self, session_id: str, *, failure: str | None = None) -> None: ...


class RolloutDriver:
    """Plays episodes of a policy against the gym.

    Args:
        gym: a `GymClient` (or anything with its session methods).
        sampler: a `TokenSampler` (token-exact) or a `ChatSampler` (evaluation only).
        renderer: the policy's chat renderer (`ChatRenderer`, or `RemoteRenderer` over the policy
            server's `/tokenize`); required for a token sampler.
        config: budgets, sampling and run name.
    """

    def __init__(
        self,
        gym: GymBackend,
        sampler: TokenSampler | ChatSampler,
        renderer: Renderer | None = None,
        config: DriverConfig | None = None,
    ) -> None:
        self.gym = gym
        self.sampler = sampler
        self.renderer = renderer
        self.config = config or DriverConfig()
        if self.config.for_training and not sampler.token_exact:
            raise ValueError(
                f"{type(sampler).__name__} is not token-exact: use it for evaluation "
                "(DriverConfig(for_training=False)), never to produce training data"
            )
        if sampler.token_exact and renderer is None:
            raise ValueError("a token sampler needs the policy's ChatRenderer")
        # The tokenizer's own response template reads turns when it declares one (see toolcalls).
        self.parser = ToolCallParser.for_tokenizer(
            getattr(renderer, "tokenizer", None), self.config.tool_format
        )

    def __repr__(self) -> str:
        return f"RolloutDriver({self.sampler!r}, {self.config!r})"

    def policy_metadata(self) -> dict[str, Any]:
        return {**self.sampler.describe(), "sampling": self.config.sampling.to_json()}

    # -- groups ------------------------------------------------------------------------------------

    async def run_group(self, spec: EpisodeSpec, n: int) -> list[Rollout]:
        """n episodes of one task, same gym seed, distinct sampling seeds, played concurrently."""
        base = self.config.sampling.seed
        specs = [
            EpisodeSpec(spec.env, spec.task_id, spec.task, spec.seed, None if base is None else base + i)
            for i in range(n)
        ]
        return await self.run_many(specs, concurrency=n)

    async def run_many(
        self,
        specs: Sequence[EpisodeSpec],
        concurrency: int = 64,
        on_episode: Callable[[int, Rollout], None] | None = None,
    ) -> list[Rollout]:
        """Play every spec, at most `concurrency` at once; results in the order of `specs`.

        `on_episode(index, rollout)` is called as each episode finishes (progress bars, JSONL files).
        """
        gate = asyncio.Semaphore(concurrency)

        async def one(index: int, spec: EpisodeSpec) -> Rollout:
            async with gate:
                rollout = await self.run_episode(spec)
            if on_episode is not None:
                on_episode(index, rollout)
            return rollout

        # Not `gather`: cancelled, gather returns at once, and the caller would close the gym client
        # under the episodes still closing their sessions; a task group waits for them.
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(one(index, spec)) for index, spec in enumerate(specs)]
        return [task.result() for task in tasks]

    # -- one episode -------------------------------------------------------------------------------

    async def run_episode(self, spec: EpisodeSpec) -> Rollout:
        rollout = Rollout(env=spec.env, task_id=spec.task_id, seed=spec.seed)
        try:
            session = await self.gym.create_session(
                spec.env,
                task_id=spec.task_id,
                task=spec.task,
                seed=spec.seed,
                ttl_s=self.config.ttl_s,
                run=self.config.run,
                policy=self.policy_metadata(),
                metadata=self.config.metadata or None,
            )
        except GymClientError as exc:
            return self._fail(rollout, "gym_error", exc)
        rollout.session_id, rollout.task_id = session.session_id, session.task_id
        rollout.transcript = list(session.messages)
        rollout.tools = list(session.tools)
        return await self.continue_episode(session, rollout, spec)

    async def continue_episode(self, session: SessionInfo, rollout: Rollout, spec: EpisodeSpec) -> Rollout:
        """Play `session` from where `rollout` stands (its `num_turns` turns taken, their tokens in its
        columns: a fork's prefix) to the end, then score and close it."""
        try:
            if self.sampler.token_exact:
                assert isinstance(self.sampler, TokenSampler) and self.renderer is not None
                await self._play_tokens(session, rollout, self.sampler, self.renderer, spec)
            else:
                assert isinstance(self.sampler, ChatSampler)
                await self._play_chat(session, rollout, self.sampler, spec)
        except PolicyError as exc:
            self._fail(rollout, exc.failure, exc)
        except GymClientError as exc:
            self._fail(rollout, "gym_error", exc)
        except asyncio.CancelledError:
            # Interrupted (Ctrl-C in `gym-server eval`, a trainer shutting down): close the session now
            # instead of leaving it live, holding a capacity slot, until its TTL runs out.
            await self._close(session, rollout)
            raise
        await self._finish(session, rollout)
        return rollout

    def _fail(self, rollout: Rollout, failure: str, exc: Exception) -> Rollout:
        rollout.failure = failure
        rollout.stop_reason = failure
        rollout.error = f"{type(exc).__name__}: {exc}"[:500]
        rollout.reward = None
        return rollout

    def _params(self, spec: EpisodeSpec, turn: int, max_tokens: int) -> SamplingParams:
        base = self.config.sampling
        seed = None if spec.sample_seed is None else spec.sample_seed * 1000 + turn
        return SamplingParams(
            max_tokens=max(1, min(base.max_tokens, max_tokens)),
            temperature=base.temperature,
            top_p=base.top_p,
            seed=seed,
        )

    async def _play_tokens(
        self,
        session: SessionInfo,
        rollout: Rollout,
        sampler: TokenSampler,
        renderer: Renderer,
        spec: EpisodeSpec,
    ) -> None:
        first = rollout.num_turns  # 0, or a fork's turn: its prefix is in the rollout's columns already
        if first == 0:
            rollout.prompt_ids = await _guarded(
                renderer.prompt_ids(session.messages, session.tools), "renderer"
            )
        prompt_ids = rollout.prompt_ids
        budget = self.config.max_completion_tokens
        stops = sorted(renderer.eos_token_ids)
        env_ids = _env_tail(rollout)
        for turn in range(first, self.config.max_turns):
            left = budget - len(rollout.completion_ids)
            if left < 1:
                rollout.stop_reason = "max_completion_tokens"
                return
            rollout.turn_starts.append(len(rollout.completion_ids))
            started = time.perf_counter()
            version = sampler.weight_version  # the weights this turn is sampled with (may change mid-episode)
            sample = await _guarded(
                sampler.sample(prompt_ids + rollout.completion_ids, self._params(spec, turn, left), stops),
                "sampler",
            )
            rollout.timings["sample_ms"] += (time.perf_counter() - started) * 1000
            if not sample.token_ids:
                # Nothing to send and nothing to train on; a retry would not be on-policy either.
                raise PolicyError("the policy returned an empty completion")
            ids = sample.token_ids[:left]  # a server that ignores max_tokens must not break the budget
            # Decoded before they are kept: decoding rejects ids outside the vocabulary, which would
            # otherwise reach the trainer's embedding lookup.
            text = await _guarded(renderer.turn_text(ids), "renderer")
            special_text = await _guarded(renderer.text(ids), "renderer")
            rollout.turn_texts.append(special_text)
            start = len(rollout.completion_ids)
            rollout.completion_ids += ids
            rollout.logprobs += sample.logprobs[: len(ids)]
            rollout.env_mask += [1] * len(ids)
            rollout.num_turns = turn + 1
            ended = bool(ids) and ids[-1] in renderer.eos_token_ids
            turn_data: dict[str, Any] | None = None
            if self.config.send_turn_data:
                turn_data = {
                    "turn": turn,
                    "env_ids": env_ids,
                    "completion_ids": ids,
                    "logprobs": sample.logprobs[: len(ids)],
                    "finish_reason": sample.finish_reason if ended else "length",
                }
                if turn == 0:
                    turn_data["prompt_ids"] = prompt_ids
                if version is not None:  # the gym's record of which version sampled it (rollout-buffer.md)
                    turn_data["weight_version"] = version
            if not ended:
                # Cut mid-turn (per-turn max_tokens or the budget): the environment never sees a half
                # message, so the state is scored as it is, but the store still gets every token.
                rollout.stop_reason = "max_completion_tokens"
                await self._record_truncated(session, text, turn_data, rollout)
                return
            # A response template needs the text the turn followed (its prefill); the formats do not.
            prefix = ""
            if self.parser.template is not None:
                prefix = await _guarded(
                    renderer.text(prompt_ids + rollout.completion_ids[:start]), "renderer"
                )
            parsed = self.parser.parse(
                text,
                call_id_prefix=f"t{turn}_",
                special_text=special_text,
                tools=rollout.tools,
                prefix=prefix,
            )
            rollout.parse_errors += parsed.error is not None
            message = parsed.to_message()
            if turn_data is not None and parsed.error:
                turn_data["parse_error"] = parsed.error
            result = await self._step(session, message, turn_data, rollout)
            if result.done:
                rollout.stop_reason = "done"
                return
            if turn + 1 >= self.config.max_turns:
                break  # no next turn: the completion ends on the model's last token
            delta = await _guarded(renderer.delta_ids(result.messages), "renderer")
            if len(rollout.completion_ids) + len(delta) >= budget:
                rollout.stop_reason = "max_completion_tokens"
                return
            env_ids = delta
            rollout.completion_ids += delta
            rollout.logprobs += [0.0] * len(delta)
            rollout.env_mask += [0] * len(delta)
        rollout.stop_reason = "max_turns"

    async def _play_chat(
        self, session: SessionInfo, rollout: Rollout, sampler: ChatSampler, spec: EpisodeSpec
    ) -> None:
        for turn in range(rollout.num_turns, self.config.max_turns):
            started = time.perf_counter()
            params = self._params(spec, turn, self.config.sampling.max_tokens)
            sample = await _guarded(sampler.chat(rollout.transcript, session.tools, params), "sampler")
            rollout.timings["sample_ms"] += (time.perf_counter() - started) * 1000
            rollout.num_turns = turn + 1
            if sample.finish_reason == "length":
                rollout.stop_reason = "max_completion_tokens"
                content = sample.message.get("content")
                text = content if isinstance(content, str) else ""
                await self._record_truncated(session, text, None, rollout)
                return
            result = await self._step(session, sample.message, None, rollout)
            if result.done:
                rollout.stop_reason = "done"
                return
        rollout.stop_reason = "max_turns"

    async def _step(
        self,
        session: SessionInfo,
        message: dict[str, Any],
        turn_data: dict[str, Any] | None,
        rollout: Rollout,
    ) -> StepResult:
        started = time.perf_counter()
        result = await self.gym.step(session.session_id, message, turn_data)
        rollout.timings["env_ms"] += (time.perf_counter() - started) * 1000
        rollout.transcript += [message, *result.messages]
        if result.done and result.reward is not None:
            rollout.reward = result.reward
        return result

    async def _record_truncated(
        self, session: SessionInfo, text: str, turn_data: dict[str, Any] | None, rollout: Rollout
    ) -> None:
        started = time.perf_counter()
        await self.gym.record_truncated_turn(session.session_id, text, turn_data)
        rollout.timings["env_ms"] += (time.perf_counter() - started) * 1000

    async def _finish(self, session: SessionInfo, rollout: Rollout) -> None:
        """Score (unless there is no signal) and close, reporting the failure class if any."""
        if rollout.failure is None:
            try:
                verdict = await self.gym.verify(session.session_id)
            except GymClientError as exc:
                self._fail(rollout, "gym_error", exc)
            else:
                rollout.reward, rollout.components = verdict.reward, verdict.components
                if verdict.failure:  # the verifier itself failed: no signal either
                    rollout.failure, rollout.reward = verdict.failure, None
        await self._close(session, rollout)

    async def _close(self, session: SessionInfo, rollout: Rollout) -> None:
        try:
            reported = rollout.failure if rollout.failure in CLIENT_FAILURES else None
            await self.gym.close(session.session_id, failure=reported)
        except GymAPIError as exc:
            if exc.status not in (404, 410):  # already gone: nothing left to close
                rollout.error = rollout.error or f"close failed: {exc}"
        except GymClientError as exc:
            rollout.error = rollout.error or f"close failed: {exc}"


def _env_tail(rollout: Rollout) -> list[int]:
    """The environment tokens that end the rollout's columns (the replies before its next turn)."""
    start = len(rollout.env_mask)
    while start > 0 and rollout.env_mask[start - 1] == 0:
        start -= 1
    return rollout.completion_ids[start:]


async def _guarded(call: Awaitable[T], what: str) -> T:
    """Await a call into the policy's sampler or tokenizer: whatever it raises (a bug in it included)
    is the policy's failure and ends the episode with a failure class instead of escaping the driver."""
    try:
        return await call
    except PolicyError:
        raise
    except Exception as exc:
        raise PolicyError(f"the {what} raised {type(exc).__name__}: {exc}") from exc
