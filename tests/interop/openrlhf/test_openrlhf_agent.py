"""OpenRLHF's real agent extension point playing gym episodes: the agent module loaded as
`--train.agent_func_path` loads it, OpenRLHF's `MultiTurnAgentExecutor` loop driving `GymAgentInstance`,
the warmed-up tiny model sampling token ids in this process (`LocalEngine`, standing in for vLLM), and
real gym servers. What OpenRLHF does with the records afterwards (Ray, vLLM, DeepSpeed) needs a GPU."""

from __future__ import annotations

import asyncio
import importlib.util
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from gym_servers import Gym
from openrlhf.utils.agent import AgentExecutorBase

import gym_trainer.openrlhf.agent_func as agent_func
from gym_trainer.chat import HERMES_TEMPLATE, ChatRenderer
from gym_trainer.client import SyncGymClient
from gym_trainer.models import CHUNK_TOKENS, SPECIAL_TOKENS, load_policy
from gym_trainer.openrlhf import AgentSettings, gym_label, gym_prompt_rows, parse_label
from gym_trainer.openrlhf.executor import GymAgentExecutor, TokenizerMismatch
from gym_trainer.openrlhf.local_engine import LocalEngine, SamplingParams

Policy = tuple[Any, Any, list[dict[str, Any]]]


class Recording:
    """The engine OpenRLHF would hand the executor, recording what it sampled (and, for one test, a
    fault injected before a given generation)."""

    def __init__(self, engine: LocalEngine, before: Callable[[int], None] = lambda n: None) -> None:
        self.engine = engine
        self.before = before
        self.outputs: list[Any] = []

    async def generate(
        self, prompt_token_ids: list[int], sampling_params: Any, multi_modal_data: Any = None
    ) -> Any:
        self.before(len(self.outputs))
        output = await self.engine.generate(prompt_token_ids, sampling_params, multi_modal_data)
        self.outputs.append(output.outputs[0])
        return output


# Episodes the mismatched-tokenizer test plays at most, until one samples an id that reads differently.
MISMATCH_SEEDS = 8


def params(seed: int = 0) -> SamplingParams:
    """What OpenRLHF's `_dispatch_prompts_to_vllm` passes: logprobs on, max_tokens left to the loop."""
    return SamplingParams(temperature=1.0, top_p=1.0, max_tokens=None, logprobs=1, seed=seed)


def label_of(task: dict[str, Any]) -> str:
    return gym_label("counter", task=task["task"], seed=task["seed"])


async def play(
    executor: GymAgentExecutor,
    engine: Any,
    tokenizer: Any,
    label: str,
    *,
    max_length: int = 2048,
    seed: int = 0,
) -> dict[str, Any]:
    try:
        return await executor.execute(
            "unused prompt text", label, params(seed), max_length, tokenizer, engine
        )
    finally:
        await executor.aclose()


def settings(gym: Gym, run: str) -> AgentSettings:
    return AgentSettings(gym_url=gym.url, run=run, max_turns=4)


def test_the_agent_module_loads_as_openrlhf_loads_it(monkeypatch: pytest.MonkeyPatch, gym: Gym) -> None:
    """The steps of OpenRLHF's `_load_agent_executor` (vllm_engine.py): a .py path, an `AgentExecutor`
    subclassing `AgentExecutorBase`, built with no arguments; settings come from the environment."""
    monkeypatch.setenv("GYM_URL", gym.url)
    monkeypatch.setenv("GYM_RUN", "orl-load")
    path = agent_func.__file__
    assert path.endswith(".py")
    spec = importlib.util.spec_from_file_location("agent_module", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert issubclass(module.AgentExecutor, AgentExecutorBase)
    executor = module.AgentExecutor()
    assert (executor.settings.gym_url, executor.settings.run) == (gym.url, "orl-load")


def test_a_group_of_counter_episodes_is_token_exact_and_scored_by_the_gym(
    gym: Gym, warm_policy: Policy
) -> None:
    """Four episodes of one task played concurrently, as OpenRLHF's `generate_responses` plays a
    prompt's samples. Each record: prompt + model tokens + environment tokens, the action ranges on the
    model's tokens exactly, logprobs equal to the model's own, the reward the gym stored."""
    model, tokenizer, tasks = warm_policy
    executor = GymAgentExecutor(settings(gym, "orl-group"))
    engines = [Recording(LocalEngine(model, tokenizer)) for _ in range(4)]
    label = label_of(tasks[0])

    async def group() -> list[dict[str, Any]]:
        try:
            return list(
                await asyncio.gather(
                    *(
                        executor.execute("p", label, params(i), 2048, tokenizer, e)
                        for i, e in enumerate(engines)
                    )
                )
            )
        finally:
            await executor.aclose()

    records = asyncio.run(group())
    renderer = ChatRenderer(tokenizer)
    multi_turn = 0
    for record, engine in zip(records, engines, strict=True):
        meta = record["gym"]
        assert meta["failure"] is None, meta
        stored = gym.stored(meta["session_id"], "completed")
        assert record["reward"] == record["scores"] == meta["reward"] == stored["reward"]
        assert (stored["run"], stored["policy"]["kind"]) == ("orl-group", "openrlhf")
        assert record["extra_logs"]["gym_no_signal"] == 0.0
        assert record["extra_logs"]["gym_turns"] == stored["num_turns"] == len(engine.outputs)

        # The sequence: the session's opening rendered once, then each turn's sampled ids verbatim and
        # the template delta of the environment's replies between turns.
        messages = stored["messages"]
        opening = messages[: next(i for i, m in enumerate(messages) if m["role"] == "assistant")]
        expected = renderer.render_prompt(opening, stored["tools"]).ids
        ranges = []
        replies: list[dict[str, Any]] = []
        turn = 0
        for message in messages[len(opening) :]:
            if message["role"] != "assistant":
                replies.append(message)
                continue
            if replies:
                expected += renderer.render_delta(replies).ids
                replies = []
            sampled = list(engine.outputs[turn].token_ids)
            ranges.append((len(expected), len(expected) + len(sampled)))
            expected += sampled
            turn += 1
        assert record["observation_tokens"] == expected
        assert [tuple(r) for r in record["action_ranges"]] == ranges
        multi_turn += len(ranges) > 1

        # The gym stored the same tokens with each turn.
        turns = stored["turns"]
        assert turns[0]["prompt_ids"] == expected[: ranges[0][0]]
        assert [t["completion_ids"] for t in turns] == [expected[a:b] for a, b in ranges]

        # Logprobs: the engine's for the model's tokens (0.0 elsewhere), and the model's own.
        logprobs = record["rollout_log_probs"]
        assert len(logprobs) == len(expected)
        in_action = {i for a, b in ranges for i in range(a, b)}
        assert all(logprobs[i] == 0.0 for i in range(len(expected)) if i not in in_action)
        with torch.no_grad():
            logits = model(torch.tensor([expected])).logits[0].float()
        recomputed = torch.log_softmax(logits, dim=-1)
        for i in sorted(in_action):
            assert logprobs[i] == pytest.approx(float(recomputed[i - 1, expected[i]]), abs=1e-3)
    assert multi_turn >= 1  # the warmed-up model calls add, reads the tool's reply, then submits


def test_a_gym_killed_mid_episode_is_no_signal_and_the_batch_goes_on(
    gym: Gym, gym_with: Callable[..., Gym], warm_policy: Policy
) -> None:
    """The gym dies after the first turn of one episode: that record says "no signal" (NaN reward and
    score, no action range, the failure class), never 0; the episode beside it is scored as usual."""
    model, tokenizer, tasks = warm_policy
    doomed = gym_with()

    def kill(generation: int) -> None:
        if generation == 1:
            doomed.process.kill()
            doomed.process.wait()

    dying = GymAgentExecutor(settings(doomed, "orl-dies"))
    healthy = GymAgentExecutor(settings(gym, "orl-beside"))
    engine = LocalEngine(model, tokenizer)

    async def batch() -> list[dict[str, Any]]:
        return list(
            await asyncio.gather(
                play(dying, Recording(engine, before=kill), tokenizer, label_of(tasks[1])),
                play(healthy, Recording(engine), tokenizer, label_of(tasks[1]), seed=1),
            )
        )

    failed, scored = asyncio.run(batch())
    assert failed["gym"]["failure"] == "gym_error" and "connect" in failed["gym"]["error"].lower()
    assert math.isnan(failed["reward"]) and math.isnan(failed["scores"])
    assert failed["action_ranges"] == [] and failed["extra_logs"]["gym_no_signal"] == 1.0
    # OpenRLHF's dynamic filter keeps a group only if min < mean score < max: a NaN mean never is.
    assert not (0.0 < (failed["scores"] + scored["scores"]) / 2 < 1.0)
    stored = gym.stored(scored["gym"]["session_id"], "completed")
    assert scored["reward"] == stored["reward"] and scored["gym"]["failure"] is None


def test_an_unreachable_gym_at_the_start_is_no_signal(warm_policy: Policy) -> None:
    from gym_servers import free_port

    model, tokenizer, tasks = warm_policy
    nowhere = AgentSettings(gym_url=f"http://127.0.0.1:{free_port()}")
    record = asyncio.run(
        play(GymAgentExecutor(nowhere), LocalEngine(model, tokenizer), tokenizer, label_of(tasks[0]))
    )
    assert record["gym"]["failure"] == "gym_error" and record["gym"]["session_id"] is None
    assert math.isnan(record["reward"]) and record["action_ranges"] == []


def test_the_length_budget_ends_the_episode_and_the_gym_still_scores_it(
    gym: Gym, warm_policy: Policy
) -> None:
    """OpenRLHF's `max_length` runs out mid-turn: the cut turn is stored, not stepped, and the gym
    scores the state as it is."""
    model, tokenizer, tasks = warm_policy
    executor = GymAgentExecutor(settings(gym, "orl-budget"))
    renderer = ChatRenderer(tokenizer)
    with SyncGymClient(gym.url) as client:
        session = client.create_session("counter", task=tasks[0]["task"], seed=tasks[0]["seed"])
        client.close(session.session_id)
    prompt_len = len(renderer.render_prompt(session.messages, session.tools).ids)
    record = asyncio.run(
        play(
            executor, LocalEngine(model, tokenizer), tokenizer, label_of(tasks[0]), max_length=prompt_len + 3
        )
    )
    assert record["gym"]["stop_reason"] == "max_completion_tokens" and record["truncated"]
    # No step was taken (the only turn was cut), so the gym files the episode as abandoned, scored.
    stored = gym.stored(record["gym"]["session_id"], "abandoned")
    assert record["reward"] == stored["reward"] is not None and stored["turns"][0]["truncated"]
    assert len(record["observation_tokens"]) == prompt_len + 3


def test_a_mismatched_tokenizer_is_a_clear_error(gym: Gym, warm_policy: Policy) -> None:
    """The trainer's tokenizer is not the engine's: the sampled ids mean other text, and the executor
    refuses instead of training on them. The engine's model is the tiny one before any warm-up: faced
    with the prompt the other tokenizer garbles, the warmed policy ends its turn at once (8 seeds of 8,
    2026-12-07), and an end of turn reads the same under both tokenizers, so nothing would be checked;
    an unwarmed model samples ordinary ids."""
    _, _, tasks = warm_policy
    model, tokenizer = load_policy("tiny")
    mismatched = reordered_tokenizer()
    assert len(mismatched) == len(tokenizer)
    special = set(tokenizer.all_special_ids)
    # An episode whose one sampled token is the end of turn reads the same under both tokenizers: nothing
    # to detect, so another seed.
    for seed in range(MISMATCH_SEEDS):
        executor = GymAgentExecutor(settings(gym, "orl-mismatch"))
        try:
            out = asyncio.run(
                play(executor, LocalEngine(model, tokenizer), mismatched, label_of(tasks[0]), seed=seed)
            )
        except TokenizerMismatch as exc:
            assert "same tokenizer" in str(exc)  # noqa: PT017 - a raise ends the loop, so no pytest.raises
            return
        tokens = out["observation_tokens"]
        sampled = [tokens[i] for start, end in out["action_ranges"] for i in range(start, end)]
        assert set(sampled) <= special, f"ids {sampled} read differently and were not refused"
    pytest.fail(f"the engine sampled only special tokens in {MISMATCH_SEEDS} episodes: nothing was checked")


def reordered_tokenizer() -> Any:
    """The tiny tokenizer with its byte symbols and its chunk tokens in reverse order: the same vocabulary
    size and chat markup, but every other id means another byte or chunk (an even number of each, so
    none keeps its place)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    core = Tokenizer(models.BPE(vocab={s: i for i, s in enumerate(reversed(alphabet))}, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    core.add_tokens([AddedToken(t, special=False, normalized=False) for t in reversed(CHUNK_TOKENS)])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    tokenizer.chat_template = HERMES_TEMPLATE
    return tokenizer


def test_labels_name_gym_tasks(gym: Gym) -> None:
    with SyncGymClient(gym.url) as client:
        rows = gym_prompt_rows(client, "counter", limit=2)
    assert len(rows) == 2 and parse_label(rows[0]["label"]).env == "counter"
    assert parse_label(rows[0]["label"]).task_id is not None
    with pytest.raises(ValueError, match="not a gym label"):
        parse_label("What is 2 + 2?")
    with pytest.raises(ValueError, match="exactly one"):
        parse_label({"env": "counter"})
