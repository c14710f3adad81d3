"""The policy samplers as a GPU run would use them, checked without a GPU.

vLLM cannot run here, so `FakeVLLM` (conftest) stands in for it: the tests check exactly what the
`CompletionsSampler` sends (token-id prompt, `return_token_ids`, `logprobs`, the LoRA adapter's model
name) and that what comes back is kept verbatim, with the weight version in the stored trajectory. The
OpenAI chat sampler runs against the real local policy server.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from conftest import ServerProcess

from gym_trainer.chat import ChatRenderer
from gym_trainer.client import GymClient, SyncGymClient
from gym_trainer.driver import DriverConfig, EpisodeSpec, RolloutDriver
from gym_trainer.remote_chat import RemoteRenderer
from gym_trainer.samplers import CompletionsSampler, OpenAIChatSampler, SamplingParams
from gym_trainer.toolcalls import render_tool_call
from gym_trainer.trl import GymRolloutFunc, gym_prompt


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
async def test_the_api_key_goes_to_every_endpoint_of_a_url_given_with_or_without_v1(
    fake_vllm: Any, renderer: ChatRenderer, suffix: str
) -> None:
    fake_vllm.script = ["hi"]
    sampler = CompletionsSampler(f"{fake_vllm.url}{suffix}", "base", api_key="sk-test")
    remote = RemoteRenderer(f"{fake_vllm.url}{suffix}", "base", api_key="sk-test")
    prompt = await remote.prompt_ids([{"role": "user", "content": "hello"}], [])
    sample = await sampler.sample(prompt, SamplingParams(max_tokens=8), sorted(renderer.eos_token_ids))
    await sampler.aclose()
    await remote.aclose()
    assert sample.token_ids[-1] in renderer.eos_token_ids
    assert len(fake_vllm.authorizations) >= 2 and set(fake_vllm.authorizations) == {"Bearer sk-test"}


def fake_logprobs(n: int) -> list[float]:
    return [-0.01 * (k + 1) for k in range(n)]


async def test_vllm_requests_are_token_in_and_answers_kept_verbatim(
    fake_vllm: Any, gym_client: GymClient, renderer: ChatRenderer, tiny_tokenizer: Any
) -> None:
    fake_vllm.script = [render_tool_call("read", {}), render_tool_call("submit", {})]
    sampler = CompletionsSampler(f"{fake_vllm.url}/v1", "counter-lora", weight_version="step-7")
    sampling = SamplingParams(max_tokens=48, temperature=0.8, top_p=0.9, seed=5)
    config = DriverConfig(max_completion_tokens=200, max_turns=4, sampling=sampling, run="vllm-shape")
    rollout = await RolloutDriver(gym_client, sampler, renderer, config).run_episode(
        EpisodeSpec("counter", "counter-0000", seed=2, sample_seed=3)
    )
    await sampler.aclose()
    assert rollout.stop_reason == "done" and rollout.failure is None and rollout.num_turns == 2

    first, second = fake_vllm.requests
    for body in (first, second):
        assert body["model"] == "counter-lora"  # the LoRA adapter's name, as vLLM's --lora-modules serves it
        assert body["return_token_ids"] is True and body["logprobs"] == 0 and body["n"] == 1
        assert body["skip_special_tokens"] is False
        assert body["stop_token_ids"] == sorted(renderer.eos_token_ids)
        assert (body["temperature"], body["top_p"]) == (0.8, 0.9)
        assert all(isinstance(token, int) for token in body["prompt"])
    assert first["prompt"] == rollout.prompt_ids
    # Turn 2 sees turn 1's prompt, the sampled ids verbatim and the environment's delta: no re-rendering.
    grown = len(second["prompt"]) - len(rollout.prompt_ids)
    assert second["prompt"] == rollout.prompt_ids + rollout.completion_ids[:grown]
    assert rollout.env_mask[:grown].count(0) > 0 and rollout.env_mask[grown:] == [1] * (
        len(rollout.env_mask) - grown
    )
    assert first["max_tokens"] == 48 and second["max_tokens"] == 48
    assert first["seed"] != second["seed"]

    turn_lengths = [rollout.env_mask[:grown].count(1), rollout.env_mask[grown:].count(1)]
    model_logprobs = [lp for lp, m in zip(rollout.logprobs, rollout.env_mask, strict=True) if m]
    assert model_logprobs == fake_logprobs(turn_lengths[0]) + fake_logprobs(turn_lengths[1])
    assert all(lp == 0.0 for lp, m in zip(rollout.logprobs, rollout.env_mask, strict=True) if not m)

    stored = await gym_client.wait_for_rollout(rollout.session_id or "")
    policy = stored["policy"]
    assert (policy["kind"], policy["model"], policy["weight_version"]) == (
        "completions",
        "counter-lora",
        "step-7",
    )
    assert policy["token_exact"] is True and policy["sampling"]["temperature"] == 0.8
    assert [t["logprobs"] for t in stored["turns"]] == [fake_logprobs(n) for n in turn_lengths]


async def test_requests_go_unseeded_when_asked(
    fake_vllm: Any, gym_client: GymClient, renderer: ChatRenderer
) -> None:
    """vLLM's CPU build dies on seeded requests under load: the CPU recipes send none."""
    fake_vllm.script = [render_tool_call("submit", {})]
    sampler = CompletionsSampler(fake_vllm.url, "counter-lora", seed_requests=False)
    config = DriverConfig(max_completion_tokens=64, max_turns=1, sampling=SamplingParams(seed=5), run="s")
    await RolloutDriver(gym_client, sampler, renderer, config).run_episode(
        EpisodeSpec("counter", "counter-0000", seed=2, sample_seed=3)
    )
    await sampler.aclose()
    assert fake_vllm.requests and all("seed" not in body for body in fake_vllm.requests)


async def test_an_unknown_adapter_name_is_a_policy_error_not_retried(
    fake_vllm: Any, gym_client: GymClient, renderer: ChatRenderer
) -> None:
    sampler = CompletionsSampler(fake_vllm.url, "no-such-lora")
    rollout = await RolloutDriver(gym_client, sampler, renderer).run_episode(
        EpisodeSpec("counter", "counter-0001")
    )
    await sampler.aclose()
    assert rollout.failure == "policy_error" and "404" in (rollout.error or "")
    assert len(fake_vllm.requests) == 1  # a refusal would be refused again


@pytest.mark.slow
def test_trl_rollout_func_with_vllm_records_the_trainer_step_as_weight_version(
    fake_vllm: Any, server_factory: Callable[..., ServerProcess], tmp_path: Path, tiny_tokenizer: Any
) -> None:
    """The GPU configuration of the TRL adapter (a `CompletionsSampler` on vLLM), minus the GPU."""
    server = server_factory(f"sqlite:///{tmp_path / 'gym.db'}", GYM_LOG_LEVEL="warning")
    server.start()
    fake_vllm.script = [render_tool_call("submit", {})] * 2
    sampler = CompletionsSampler(fake_vllm.url, "counter-lora")
    rollout = GymRolloutFunc(server.url, sampler=sampler, max_turns=2, run="trl-vllm")
    trainer = SimpleNamespace(
        args=SimpleNamespace(max_completion_length=40, temperature=0.7, top_p=1.0),
        state=SimpleNamespace(global_step=12),
        processing_class=tiny_tokenizer,
    )
    out = rollout([gym_prompt("counter", "x", task_id="counter-0003")] * 2, trainer)
    assert out["gym_stop_reason"] == ["done", "done"]
    assert [body["max_tokens"] for body in fake_vllm.requests] == [40, 40]  # TRL's max_completion_length
    assert {body["temperature"] for body in fake_vllm.requests} == {0.7}
    with SyncGymClient(server.url) as gym:
        for session_id in out["gym_session_id"]:
            policy = gym.get_rollout(session_id)["policy"]
            assert (policy["model"], policy["weight_version"]) == ("counter-lora", "12")
    rollout.close()


async def test_the_chat_sampler_is_not_token_exact_and_is_refused_for_training(
    policy_url: str, gym_client: GymClient, renderer: ChatRenderer, tiny_tokenizer: Any
) -> None:
    sampler = OpenAIChatSampler(f"{policy_url}/v1", "tiny")
    assert sampler.token_exact is False and sampler.describe()["token_exact"] is False
    with pytest.raises(ValueError, match="not token-exact"):
        RolloutDriver(gym_client, sampler, renderer, DriverConfig())
    # Evaluation may use it: the episode is played through the real policy server's chat endpoint.
    config = DriverConfig(max_turns=2, sampling=SamplingParams(max_tokens=8, seed=0), for_training=False)
    rollout = await RolloutDriver(gym_client, sampler, None, config).run_episode(
        EpisodeSpec("counter", "counter-0002")
    )
    assert rollout.failure is None and rollout.reward is not None and rollout.num_turns >= 1
    assert rollout.completion_ids == [] and rollout.prompt_ids == []  # no tokens to train on
    stored = await gym_client.wait_for_rollout(rollout.session_id or "")
    assert stored["policy"]["kind"] == "openai-chat" and stored["policy"]["token_exact"] is False
    assert not any("completion_ids" in turn for turn in stored["turns"] or [])
    await sampler.aclose()

    trainer = SimpleNamespace(
        args=SimpleNamespace(max_completion_length=16, temperature=1.0, top_p=1.0),
        state=SimpleNamespace(global_step=0),
        processing_class=tiny_tokenizer,
    )
    rollout_func = GymRolloutFunc("http://127.0.0.1:9", sampler=sampler)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not token-exact"):
        rollout_func([gym_prompt("counter", "x", task_id="counter-0000")], trainer)
    rollout_func.close()


def test_fake_vllm_refuses_text_prompts(fake_vllm: Any) -> None:
    """The fake is only as lenient as vLLM: the sampler's token-in request shape is what it accepts."""
    answer = httpx.post(
        f"{fake_vllm.url}/v1/completions", json={"model": "base", "prompt": "hi", "max_tokens": 1}
    )
    assert answer.status_code == 400
