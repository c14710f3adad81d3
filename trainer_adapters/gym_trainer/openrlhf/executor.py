"""`GymAgentExecutor`: OpenRLHF's agent executor for gym episodes (`--agent_func_path`, see
`agent_func.py`).

Each `execute` call is one gym session. It runs OpenRLHF's own `MultiTurnAgentExecutor` loop with a
`GymAgentInstance` bound to that call's `GymEpisode`, and hands the loop an engine wrapper that records
each turn's token ids and logprobs for the episode (and the gym's stored trajectory) and checks that the
trainer's tokenizer is the engine's.

**No signal.** OpenRLHF has no "missing reward": an executor's record must carry a number, and every
record of a prompt's group enters the group's baseline. What it does let an executor say is:
`action_ranges` (the loss mask) and `scores`, which `--algo.dynamic_filtering_enable` reads to drop a
whole group when its mean score is outside `--algo.dynamic_filtering_range` (a NaN mean is never
inside). So an episode that failed (gym unreachable or refusing, the policy engine failing, the verifier
failing) is returned with `action_ranges = []` (none of its tokens is trained on), `reward` and
`scores` NaN (never 0: a 0 would be a verdict), `extra_logs["gym_no_signal"] = 1.0`, and the failure
class and error under the extra key `gym`. With dynamic filtering on, OpenRLHF drops that group and
draws replacement prompts: the batch goes on. Run with dynamic filtering (it needs
`--rollout.n_samples_per_prompt` > 1); without it a NaN reaches the group baseline. docs/openrlhf.md.

**Mismatched tokenizer.** OpenRLHF renders nothing itself: the prompt and every delta are rendered with
the `hf_tokenizer` it passes (the trainer's, `--pretrain`). If the engine (vLLM) samples with another
vocabulary, the ids would silently mean other text; so every turn's ids must lie in the trainer's
vocabulary and decode to the text the engine detokenized (whitespace aside), or `TokenizerMismatch` is
raised: a configuration error, not an episode failure.
"""

from __future__ import annotations

import asyncio
import functools
import math
from typing import Any

from openrlhf.utils.agent import AgentExecutorBase, MultiTurnAgentExecutor

from gym_trainer.chat import ChatRenderer
from gym_trainer.client import GymClient
from gym_trainer.openrlhf.episode import GymAgentInstance, GymEpisode, Sample
from gym_trainer.openrlhf.settings import AgentSettings
from gym_trainer.samplers.base import PolicyError

__all__ = ["GymAgentExecutor", "TokenizerMismatch"]


class TokenizerMismatch(ValueError):
    """The engine sampled ids that the trainer's tokenizer reads differently."""


class _RecordingEngine:
    """OpenRLHF's engine (`generate(prompt_token_ids, sampling_params, multi_modal_data=None)`) with
    each turn's sample recorded for the episode and checked against the trainer's tokenizer."""

    def __init__(self, engine: Any, tokenizer: Any, episode: GymEpisode) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.episode = episode

    async def generate(
        self, prompt_token_ids: list[int], sampling_params: Any, multi_modal_data: Any = None
    ) -> Any:
        try:
            output = await self.engine.generate(
                prompt_token_ids, sampling_params, multi_modal_data=multi_modal_data
            )
        except Exception as exc:
            raise PolicyError(f"the engine raised {type(exc).__name__}: {exc}") from exc
        choice = output.outputs[0]
        ids = [int(i) for i in choice.token_ids]
        self._check(ids, str(choice.text))
        logprobs = None
        if choice.logprobs is not None:
            logprobs = [
                float(entry[token].logprob) for entry, token in zip(choice.logprobs, ids, strict=True)
            ]
        self.episode.last = Sample(ids, logprobs, str(choice.finish_reason))
        return output

    def _check(self, ids: list[int], text: str) -> None:
        size = len(self.tokenizer)
        outside = [i for i in ids if not 0 <= i < size]
        if outside:
            raise TokenizerMismatch(
                f"the engine sampled ids {outside[:5]} outside the trainer tokenizer's vocabulary of {size}: "
                "vLLM and the trainer must load the same tokenizer (--pretrain)"
            )
        decoded = self.tokenizer.decode(ids, skip_special_tokens=False)
        if "".join(decoded.split()) != "".join(text.split()):
            raise TokenizerMismatch(
                f"the trainer's tokenizer reads the engine's ids as {decoded[:80]!r}, the engine as "
                f"{text[:80]!r}: vLLM and the trainer must load the same tokenizer (--pretrain)"
            )


class GymAgentExecutor(AgentExecutorBase):  # type: ignore[misc]  # OpenRLHF's base is untyped
    """Plays one gym episode per OpenRLHF `execute` call; settings from the environment by default."""

    def __init__(self, settings: AgentSettings | None = None) -> None:
        self.settings = settings or AgentSettings.from_env()
        self._gym: GymClient | None = None

    def _client(self) -> GymClient:
        if self._gym is None:  # made on first use, inside the actor's event loop
            self._gym = GymClient(self.settings.gym_urls, api_key=self.settings.api_key)
        return self._gym

    async def aclose(self) -> None:
        if self._gym is not None:
            await self._gym.aclose()
            self._gym = None

    async def execute(
        self,
        prompt: Any,
        label: Any,
        sampling_params: Any,
        max_length: int,
        hf_tokenizer: Any,
        llm_engine: Any,
        images: Any = None,
    ) -> dict[str, Any]:
        renderer = ChatRenderer(hf_tokenizer, chat_template=self.settings.template())
        policy = {"kind": "openrlhf", "model": str(getattr(hf_tokenizer, "name_or_path", "") or "unknown")}
        episode = GymEpisode(self._client(), renderer, self.settings, policy=policy)
        loop = MultiTurnAgentExecutor(GymAgentInstance)
        loop.agent_instance_cls = functools.partial(GymAgentInstance, episode)  # this call's episode
        engine = _RecordingEngine(llm_engine, hf_tokenizer, episode)
        try:
            result = await loop.execute(
                prompt, label, sampling_params, max_length, hf_tokenizer, engine, images
            )
        except PolicyError as exc:
            episode.fail("policy_error", exc)
            await episode.close()
            result = _empty_record(prompt, label, images, episode.prompt_ids, sampling_params)
        except asyncio.CancelledError:
            await episode.close()
            raise
        # The loop stops without a last step when OpenRLHF's length budget runs out.
        await episode.finish("max_completion_tokens")
        return _with_verdict(result, episode)


def _empty_record(
    prompt: Any, label: Any, images: Any, prompt_ids: list[int], sampling_params: Any
) -> dict[str, Any]:
    """A record with no action for an episode whose loop could not run to its end."""
    return {
        "prompt": prompt,
        "label": label,
        "images": images,
        "mm_train_inputs": None,
        "reward": 0.0,
        "scores": 0.0,
        "observation_tokens": list(prompt_ids),
        "action_ranges": [],
        "rollout_log_probs": [0.0] * len(prompt_ids) if sampling_params.logprobs is not None else None,
        "truncated": False,
        "extra_logs": {},
    }


def _with_verdict(result: dict[str, Any], episode: GymEpisode) -> dict[str, Any]:
    """The loop's record with the gym's verdict as the reward, or the no-signal convention."""
    no_signal = episode.failure is not None or episode.reward is None
    reward = math.nan if no_signal else float(episode.reward or 0.0)
    logs = {
        "gym_no_signal": 1.0 if no_signal else 0.0,
        "gym_turns": float(episode.turns),
        "gym_parse_errors": float(episode.parse_errors),
    }
    return {
        **result,
        "reward": reward,
        "scores": reward,
        "action_ranges": [] if no_signal else result["action_ranges"],
        "extra_logs": {**result.get("extra_logs", {}), **logs},
        "gym": {
            "session_id": episode.session.session_id if episode.session else None,
            "reward": None if no_signal else reward,
            "components": episode.components,
            "failure": episode.failure,
            "stop_reason": episode.stop_reason,
            "error": episode.error,
        },
    }
