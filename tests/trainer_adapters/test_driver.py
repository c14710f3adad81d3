"""The rollout driver's token invariants, endings and failure classes, against an in-process gym.

A scripted sampler makes every sampled token known, so the tests can check exactly: one logprob per
completion token, env_mask zero exactly on environment tokens, and prompt + completion decoding to the
chat template's rendering of the stored transcript.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from gym_trainer.chat import ChatRenderer
from gym_trainer.client import GymClient
from gym_trainer.driver import DriverConfig, EpisodeSpec, Rollout, RolloutDriver, summarize
from gym_trainer.samplers.base import (
    ChatSample,
    PolicyError,
    PolicyTimeout,
    SamplingParams,
    TokenSample,
)
from gym_trainer.toolcalls import render_tool_call


def counter_start(task_id: str, seed: int) -> int:
    """The counter's seeded start value, as its environment draws it."""
    import random

    return random.Random(f"{task_id}\x00{seed}").randint(0, 20)


def assert_token_invariants(rollout: Rollout, renderer: ChatRenderer) -> None:
    assert len(rollout.logprobs) == len(rollout.completion_ids) == len(rollout.env_mask)
    assert set(rollout.env_mask) <= {0, 1}
    assert all(lp == 0.0 for lp, m in zip(rollout.logprobs, rollout.env_mask, strict=True) if m == 0)
    # Model spans decode to the sampled turns; environment spans to the template's deltas of the replies.
    spans: list[tuple[int, list[int]]] = []
    for token, mask in zip(rollout.completion_ids, rollout.env_mask, strict=True):
        if spans and spans[-1][0] == mask:
            spans[-1][1].append(token)
        else:
            spans.append((mask, [token]))
    model_spans = [renderer.decode(ids) for mask, ids in spans if mask == 1]
    assert model_spans == rollout.turn_texts
    replies = _replies_after_each_turn(rollout.transcript)
    env_spans = [renderer.decode(ids) for mask, ids in spans if mask == 0]
    assert env_spans == [renderer.render_delta(r).text for r in replies[: len(env_spans)]]


def assert_stored_turns_rebuild(stored: dict[str, Any], rollout: Rollout, renderer: ChatRenderer) -> None:
    """The gym's stored `turns` hold exactly the tokens the trainer gets, a cut last turn included."""
    turns = stored["turns"]
    assert turns[0]["prompt_ids"] == rollout.prompt_ids
    assert [tok for t in turns for tok in t["env_ids"] + t["completion_ids"]] == rollout.completion_ids
    model_logprobs = [lp for lp, m in zip(rollout.logprobs, rollout.env_mask, strict=True) if m]
    assert [lp for t in turns for lp in t["logprobs"]] == model_logprobs
    assert [t["turn"] for t in turns] == list(range(rollout.num_turns))
    if rollout.completion_ids[-1] in renderer.eos_token_ids:
        assert not any(t.get("truncated") for t in turns)
    else:
        assert [t.get("truncated", False) for t in turns] == [False] * (len(turns) - 1) + [True]
        assert turns[-1]["finish_reason"] == "length"
        assert turns[-1]["content"] == renderer.completion_text(turns[-1]["completion_ids"])


def _replies_after_each_turn(transcript: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    groups: list[list[dict[str, Any]]] = []
    for message in transcript:
        if message["role"] == "assistant":
            groups.append([])
        elif groups:
            groups[-1].append(message)
    return groups


def driver(gym: GymClient, sampler: Any, renderer: ChatRenderer, **config: Any) -> RolloutDriver:
    return RolloutDriver(gym, sampler, renderer, DriverConfig(run="driver-test", **config))


async def test_a_solved_counter_episode_is_token_exact(
    gym_client: GymClient, tiny_tokenizer: Any, renderer: ChatRenderer, scripted: Any
) -> None:
    start = counter_start("counter-0000", 3)
    target = 26
    script = [
        render_tool_call("read", {}),
        render_tool_call("add", {"amount": 10}),
        render_tool_call("add", {"amount": target - start - 10}),
        render_tool_call("submit", {}),
    ]
    sampler = scripted(tiny_tokenizer, script)
    rollout = await driver(gym_client, sampler, renderer).run_episode(
        EpisodeSpec("counter", "counter-0000", seed=3)
    )
    assert rollout.stop_reason == "done" and rollout.failure is None
    assert rollout.reward == 1.0 and rollout.components["reached"] == 1.0
    assert rollout.num_turns == 4 and rollout.parse_errors == 0
    assert_token_invariants(rollout, renderer)
    assert rollout.completion_ids[-1] == tiny_tokenizer.eos_token_id  # ends on the model's EOS
    assert rollout.env_mask.count(1) == sum(len(tiny_tokenizer.encode(t)) + 1 for t in script)
    # Each sample saw exactly the tokens so far: the prompt is rendered once and only extended.
    for earlier, later in zip(sampler.prompts, sampler.prompts[1:], strict=False):
        assert later[: len(earlier)] == earlier
    assert sampler.prompts[0] == rollout.prompt_ids
    # Canonical tool calls: the tokens decode to the template's rendering of the whole transcript.
    rendered = tiny_tokenizer.apply_chat_template(
        rollout.transcript[:-1], tools=rollout.tools, tokenize=False
    )
    assert renderer.decode(rollout.prompt_ids + rollout.completion_ids) == rendered.removesuffix("\n")

    stored = await gym_client.wait_for_rollout(rollout.session_id or "")
    assert stored["status"] == "completed" and stored["reward"] == 1.0
    assert stored["policy"]["model"] == "scripted" and stored["policy"]["sampling"]["temperature"] == 1.0
    assert [t["turn"] for t in stored["turns"]] == [0, 1, 2, 3]
    assert_stored_turns_rebuild(stored, rollout, renderer)
    assert [lp for t in stored["turns"] for lp in t["logprobs"]] == [-0.5] * rollout.env_mask.count(1)


async def test_malformed_tool_call_goes_to_the_environment_as_text(
    gym_client: GymClient, tiny_tokenizer: Any, renderer: ChatRenderer, scripted: Any
) -> None:
    sampler = scripted(tiny_tokenizer, ['<tool_call>{"name": "add", "arguments": {oops</tool_call>'])
    rollout = await driver(gym_client, sampler, renderer).run_episode(EpisodeSpec("counter", "counter-0001"))
    assert rollout.parse_errors == 1
    assert rollout.stop_reason == "done" and rollout.failure is None  # a plain message ends the counter
    assert rollout.reward == 0.0
    assert rollout.transcript[-1]["content"].startswith("<tool_call>")
    stored = await gym_client.wait_for_rollout(rollout.session_id or "")
    assert "not JSON" in stored["turns"][0]["parse_error"]


async def test_turn_and_token_budgets(
    gym_client: GymClient, tiny_tokenizer: Any, renderer: ChatRenderer, scripted: Any
) -> None:
    reads = [render_tool_call("read", {})] * 5
    capped = await driver(gym_client, scripted(tiny_tokenizer, reads), renderer, max_turns=2).run_episode(
        EpisodeSpec("counter", "counter-0002")
    )
    assert capped.stop_reason == "max_turns" and capped.num_turns == 2
    assert capped.reward == 0.0 and capped.failure is None
    assert_token_invariants(capped, renderer)
    assert capped.completion_ids[-1] == tiny_tokenizer.eos_token_id

    # Endless output: the turn is cut at the budget and never stepped; the state is scored as it is.
    endless = scripted(tiny_tokenizer, ["x" * 500], eos=False)
    cut = await driver(gym_client, endless, renderer, max_completion_tokens=40).run_episode(
        EpisodeSpec("counter", "counter-0002")
    )
    assert cut.stop_reason == "max_completion_tokens"
    assert len(cut.completion_ids) == 40 and cut.num_turns == 1
    assert cut.reward == 0.0
    stored = await gym_client.wait_for_rollout(cut.session_id or "")
    assert stored["status"] == "abandoned" and stored["num_turns"] == 0
    assert [m["role"] for m in stored["messages"]] == ["system", "user"]
    assert_stored_turns_rebuild(stored, cut, renderer)

    # The budget also counts environment tokens: an episode stops before a reply that would not fit.
    tight = await driver(
        gym_client, scripted(tiny_tokenizer, reads), renderer, max_completion_tokens=30
    ).run_episode(EpisodeSpec("counter", "counter-0002"))
    assert tight.stop_reason == "max_completion_tokens" and len(tight.completion_ids) <= 30
    assert_stored_turns_rebuild(await gym_client.wait_for_rollout(tight.session_id or ""), tight, renderer)


async def test_a_turn_cut_late_in_an_episode_still_reaches_the_store(
    gym_client: GymClient, tiny_tokenizer: Any, renderer: ChatRenderer, scripted: Any
) -> None:
    script = [render_tool_call("read", {}), render_tool_call("add", {"amount": 1}), "x" * 500]
    # Cut by the per-turn cap (`sampling.max_tokens`): the third turn stops at 40 tokens.
    capped = await driver(
        gym_client, scripted(tiny_tokenizer, script), renderer, sampling=SamplingParams(max_tokens=40)
    ).run_episode(EpisodeSpec("counter", "counter-0003", seed=1))
    assert capped.stop_reason == "max_completion_tokens" and capped.num_turns == 3
    assert capped.env_mask[-41:] == [0] + [1] * 40
    assert_token_invariants(capped, renderer)
    stored = await gym_client.wait_for_rollout(capped.session_id or "")
    assert stored["status"] == "abandoned" and stored["num_turns"] == 2
    assert not any("x" * 40 in str(m.get("content")) for m in stored["messages"])
    assert_stored_turns_rebuild(stored, capped, renderer)
    assert stored["reward"] == capped.reward == 0.0  # scored on the state the stepped turns left

    # Cut by the episode's budget: 7 tokens of the third turn fit.
    budget = len(capped.completion_ids) - 40 + 7
    cut = await driver(
        gym_client, scripted(tiny_tokenizer, script), renderer, max_completion_tokens=budget
    ).run_episode(EpisodeSpec("counter", "counter-0003", seed=1))
    assert cut.stop_reason == "max_completion_tokens" and len(cut.completion_ids) == budget
    assert cut.completion_ids[:-7] == capped.completion_ids[:-40]
    stored = await gym_client.wait_for_rollout(cut.session_id or "")
    assert_stored_turns_rebuild(stored, cut, renderer)
    assert stored["turns"][-1]["content"] == "x" * 7

    # Without token data the cut text is still stored, marked as such.
    bare = await driver(
        gym_client,
        scripted(tiny_tokenizer, script),
        renderer,
        max_completion_tokens=budget,
        send_turn_data=False,
    ).run_episode(EpisodeSpec("counter", "counter-0003", seed=1))
    stored = await gym_client.wait_for_rollout(bare.session_id or "")
    assert stored["turns"] == [{"content": "x" * 7, "truncated": True}]


class BrokenSampler:
    token_exact = True
    weight_version: str | None = None

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def describe(self) -> dict[str, Any]:
        return {"model": "broken"}

    async def aclose(self) -> None:
        return None

    async def sample(
        self, prompt_ids: Sequence[int], params: SamplingParams, stop_token_ids: Sequence[int]
    ) -> TokenSample:
        raise self.exc


@pytest.mark.parametrize("exc", [PolicyError("garbage"), PolicyTimeout("slow")])
async def test_policy_failures_become_failure_classes_with_no_reward(
    gym_client: GymClient, renderer: ChatRenderer, exc: PolicyError
) -> None:
    rollout = await driver(gym_client, BrokenSampler(exc), renderer).run_episode(
        EpisodeSpec("counter", "counter-0003")
    )
    assert rollout.failure == exc.failure == rollout.stop_reason
    assert rollout.reward is None  # no signal, never a zero
    stored = await gym_client.wait_for_rollout(rollout.session_id or "")
    assert stored["status"] in ("abandoned", "failed")  # "failed" once the gym takes ?failure=
    summary = summarize([rollout])
    assert summary["failures"] == 1 and summary["scored"] == 0 and summary["mean_reward"] is None


async def test_a_gym_error_mid_episode_is_recorded(
    gym_client: GymClient, tiny_tokenizer: Any, renderer: ChatRenderer, scripted: Any
) -> None:
    class ClosingSampler(scripted):  # type: ignore[misc]
        async def sample(
            self, prompt_ids: Sequence[int], params: SamplingParams, stop_token_ids: Sequence[int]
        ) -> TokenSample:
            # The session disappears while the model thinks (reaped, or the server restarted).
            manager = gym_client.app.state.manager  # type: ignore[attr-defined]
            for session_id in list(manager._live):
                await manager.close(session_id)
            result: TokenSample = await super().sample(prompt_ids, params, stop_token_ids)
            return result

    sampler = ClosingSampler(tiny_tokenizer, [render_tool_call("read", {})])
    rollout = await driver(gym_client, sampler, renderer).run_episode(EpisodeSpec("counter", "counter-0004"))
    assert rollout.failure == "gym_error" and rollout.reward is None
    assert "410" in (rollout.error or "")


async def test_groups_share_task_and_seed_with_distinct_sampling_seeds(
    gym_client: GymClient, tiny_tokenizer: Any, renderer: ChatRenderer, scripted: Any
) -> None:
    seeds: list[int | None] = []

    class SeedRecorder(scripted):  # type: ignore[misc]
        async def sample(
            self, prompt_ids: Sequence[int], params: SamplingParams, stop_token_ids: Sequence[int]
        ) -> TokenSample:
            seeds.append(params.seed)
            result: TokenSample = await super().sample(prompt_ids, params, stop_token_ids)
            return result

    sampler = SeedRecorder(tiny_tokenizer, [render_tool_call("submit", {})] * 4)
    group = await driver(
        gym_client, sampler, renderer, sampling=SamplingParams(max_tokens=64, seed=7)
    ).run_group(EpisodeSpec("counter", "counter-0005", seed=11), 4)
    assert {r.task_id for r in group} == {"counter-0005"} and {r.seed for r in group} == {11}
    assert len({tuple(r.prompt_ids) for r in group}) == 1  # same start state, same prompt
    assert len(set(seeds)) == 4
    rewards = {r.reward for r in group}
    assert len(rewards) == 1  # same start, same actions, same score
    summary = summarize(group)
    assert summary["episodes"] == 4 and summary["stop_reasons"] == {"done": 4}


async def test_chat_samplers_are_refused_for_training(gym_client: GymClient, renderer: ChatRenderer) -> None:
    class EchoChat:
        token_exact = False
        weight_version: str | None = None

        def describe(self) -> dict[str, Any]:
            return {"model": "echo"}

        async def aclose(self) -> None:
            return None

        async def chat(
            self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]], params: SamplingParams
        ) -> ChatSample:
            await asyncio.sleep(0)
            return ChatSample({"role": "assistant", "content": "done"}, "stop")

    with pytest.raises(ValueError, match="not token-exact"):
        RolloutDriver(gym_client, EchoChat(), renderer, DriverConfig())
    evaluator = RolloutDriver(gym_client, EchoChat(), None, DriverConfig(for_training=False))
    rollout = await evaluator.run_episode(EpisodeSpec("counter", "counter-0006"))
    assert rollout.stop_reason == "done" and rollout.reward == 0.0 and rollout.completion_ids == []
