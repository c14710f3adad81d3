"""The local policy server: vLLM-shaped token-in completions, chat with tools, batching, errors; and the
samplers that talk to it giving the same tokens as in-process sampling."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import free_port

from gym_trainer.chat import ChatRenderer
from gym_trainer.client import GymClient
from gym_trainer.driver import DriverConfig, EpisodeSpec, RolloutDriver
from gym_trainer.generation import GenerationOutput, GenerationRequest
from gym_trainer.samplers import (
    CompletionsSampler,
    LocalSampler,
    OpenAIChatSampler,
    PolicyError,
    SamplingParams,
)
from gym_trainer.toolcalls import render_tool_call

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add to the counter.",
            "parameters": {
                "type": "object",
                "properties": {"amount": {"type": "integer"}},
                "required": ["amount"],
            },
        },
    }
]


@pytest.fixture
async def policy(tiny_model: Any, tiny_tokenizer: Any) -> AsyncIterator[httpx.AsyncClient]:
    from gym_trainer.policy_server import create_policy_app

    app = create_policy_app(tiny_model, tiny_tokenizer, name="tiny", max_batch=8)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://policy") as client:
        client.app = app  # type: ignore[attr-defined]
        yield client
    app.state.policy.engine.stop()


async def test_models_lists_the_served_name(policy: httpx.AsyncClient) -> None:
    data = (await policy.get("/v1/models")).json()
    assert data["object"] == "list" and data["data"][0]["id"] == "tiny"


async def test_health_says_where_the_model_samples(policy: httpx.AsyncClient) -> None:
    health = (await policy.get("/health")).json()
    assert health["status"] == "ok" and health["device"] == "cpu torch.float32"


async def test_token_in_completions_are_vllm_shaped_and_exact(
    policy: httpx.AsyncClient, tiny_model: Any, tiny_tokenizer: Any
) -> None:
    import torch

    prompt = tiny_tokenizer.encode("Bring the counter to 26.", add_special_tokens=False)
    body = {
        "model": "tiny",
        "prompt": prompt,
        "max_tokens": 12,
        "temperature": 0.7,
        "seed": 5,
        "logprobs": 0,
        "return_token_ids": True,
    }
    answer = (await policy.post("/v1/completions", json=body)).json()
    choice = answer["choices"][0]
    assert answer["object"] == "text_completion" and choice["prompt_token_ids"] == prompt
    ids, logprobs = choice["token_ids"], choice["logprobs"]["token_logprobs"]
    assert len(ids) == len(logprobs) == len(choice["logprobs"]["tokens"]) and 1 <= len(ids) <= 12
    assert choice["finish_reason"] in ("stop", "length")
    assert answer["usage"]["completion_tokens"] == len(ids)
    # Processed logprobs: log-softmax of logits / temperature at each sampled position.
    with torch.no_grad():
        logits = tiny_model(torch.tensor([prompt + ids])).logits[0]
    expected = torch.log_softmax(logits / 0.7, dim=-1)
    for k, token in enumerate(ids):
        assert abs(float(expected[len(prompt) - 1 + k, token]) - logprobs[k]) < 1e-4
    # Same seed, same tokens; and n=2 gives two seeded choices.
    again = (await policy.post("/v1/completions", json=body)).json()["choices"][0]
    assert again["token_ids"] == ids
    two = (await policy.post("/v1/completions", json={**body, "n": 2})).json()["choices"]
    assert [c["index"] for c in two] == [0, 1] and two[0]["token_ids"] == ids
    plain = (await policy.post("/v1/completions", json={"prompt": "hello", "max_tokens": 3})).json()
    assert "token_ids" not in plain["choices"][0] and plain["choices"][0]["logprobs"] is None


async def test_concurrent_requests_share_batches(policy: httpx.AsyncClient, tiny_tokenizer: Any) -> None:
    engine = policy.app.state.policy.engine  # type: ignore[attr-defined]
    before_batches, before_requests = engine.batches, engine.requests
    body = {"prompt": [65, 66, 67], "max_tokens": 8, "seed": 1, "return_token_ids": True}
    answers = await asyncio.gather(*(policy.post("/v1/completions", json=body) for _ in range(12)))
    assert all(a.status_code == 200 for a in answers)
    assert engine.requests - before_requests == 12
    assert engine.batches - before_batches < 12
    # A seeded request samples the same tokens whichever batch it ran in.
    assert len({tuple(a.json()["choices"][0]["token_ids"]) for a in answers}) == 1


@pytest.mark.parametrize(
    ("body", "status", "text"),
    [
        ({"model": "other", "prompt": [1], "max_tokens": 1}, 404, "does not exist"),
        ({"prompt": [10**6], "max_tokens": 1}, 400, "token ids"),
        ({"prompt": [1], "max_tokens": 1, "stream": True}, 400, "stream=true"),
        ({"prompt": [1], "max_tokens": 10**6}, 400, "context length"),
        ({"prompt": [1], "max_tokens": 0}, 400, "max_tokens"),
        ({"prompt": [1], "max_tokens": 1, "stop": ["x"]}, 400, "stop strings"),
    ],
)
async def test_bad_requests_get_openai_errors(
    policy: httpx.AsyncClient, body: dict[str, Any], status: int, text: str
) -> None:
    response = await policy.post("/v1/completions", json=body)
    assert response.status_code == status
    assert text in response.json()["error"]["message"]


async def test_chat_renders_tools_and_parses_tool_calls(
    policy: httpx.AsyncClient, tiny_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    messages = [{"role": "system", "content": "Count."}, {"role": "user", "content": "Add 3."}]
    renderer = ChatRenderer(tiny_tokenizer)
    body = {"model": "tiny", "messages": messages, "tools": TOOLS, "max_tokens": 8, "return_token_ids": True}
    answer = (await policy.post("/v1/chat/completions", json={**body, "logprobs": True})).json()
    assert answer["prompt_token_ids"] == renderer.render_prompt(messages, TOOLS).ids
    choice = answer["choices"][0]
    assert len(choice["logprobs"]["content"]) == len(choice["token_ids"])

    call_ids = [
        *tiny_tokenizer.encode(render_tool_call("add", {"amount": 3}), add_special_tokens=False),
        tiny_tokenizer.eos_token_id,
    ]

    async def canned(request: GenerationRequest) -> GenerationOutput:
        return GenerationOutput(call_ids, [-0.1] * len(call_ids), "stop")

    monkeypatch.setattr(policy.app.state.policy.engine, "generate", canned)  # type: ignore[attr-defined]
    called = (await policy.post("/v1/chat/completions", json=body)).json()["choices"][0]
    assert called["finish_reason"] == "tool_calls"
    assert called["message"]["tool_calls"][0]["function"] == {"name": "add", "arguments": '{"amount": 3}'}
    assert called["token_ids"] == call_ids

    sampler = OpenAIChatSampler("http://policy/v1", "tiny", transport=httpx.ASGITransport(app=policy.app))  # type: ignore[attr-defined]
    sample = await sampler.chat(messages, TOOLS, SamplingParams(max_tokens=8))
    assert sample.message["tool_calls"][0]["function"]["name"] == "add"
    await sampler.aclose()


async def test_chat_streams_the_same_completion_as_chunks(
    policy: httpx.AsyncClient, tiny_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Agent programs that only stream (verifiers' chat harness) get the completion the plain route
    gives, as OpenAI chunks: the message in one delta (tool calls indexed), the finish reason, usage."""
    messages = [{"role": "user", "content": "Add 3."}]
    body = {"model": "tiny", "messages": messages, "tools": TOOLS, "max_tokens": 8, "seed": 5}
    plain = (await policy.post("/v1/chat/completions", json=body)).json()
    streamed = await policy.post(
        "/v1/chat/completions", json={**body, "stream": True, "stream_options": {"include_usage": True}}
    )
    assert streamed.headers["content-type"].startswith("text/event-stream")
    events = [line.removeprefix("data: ") for line in streamed.text.split("\n\n") if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
    first, last, usage = chunks
    assert first["choices"][0]["delta"]["content"] == plain["choices"][0]["message"]["content"]
    assert last["choices"][0]["finish_reason"] == plain["choices"][0]["finish_reason"]
    assert usage["choices"] == [] and usage["usage"] == plain["usage"]

    call_ids = [
        *tiny_tokenizer.encode(render_tool_call("add", {"amount": 3}), add_special_tokens=False),
        tiny_tokenizer.eos_token_id,
    ]

    async def canned(request: GenerationRequest) -> GenerationOutput:
        return GenerationOutput(call_ids, [-0.1] * len(call_ids), "stop")

    monkeypatch.setattr(policy.app.state.policy.engine, "generate", canned)  # type: ignore[attr-defined]
    streamed = await policy.post("/v1/chat/completions", json={**body, "stream": True})
    first, last = (json.loads(e.removeprefix("data: ")) for e in streamed.text.split("\n\n")[:2])
    call = first["choices"][0]["delta"]["tool_calls"][0]
    assert call["index"] == 0 and call["function"] == {"name": "add", "arguments": '{"amount": 3}'}
    assert last["choices"][0]["finish_reason"] == "tool_calls"
    assert streamed.text.endswith("data: [DONE]\n\n")


async def test_http_and_in_process_samplers_give_the_same_tokens(
    policy: httpx.AsyncClient, tiny_model: Any, tiny_tokenizer: Any
) -> None:
    transport = httpx.ASGITransport(app=policy.app)  # type: ignore[attr-defined]
    remote = CompletionsSampler("http://policy", "tiny", transport=transport, weight_version="w1")
    local = LocalSampler(tiny_model, tiny_tokenizer.pad_token_id, name="tiny")
    prompt = tiny_tokenizer.encode("<|im_start|>user\nhi<|im_end|>\n", add_special_tokens=False)
    params = SamplingParams(max_tokens=10, temperature=1.0, seed=42)
    stops = [tiny_tokenizer.eos_token_id]
    a, b = await remote.sample(prompt, params, stops), await local.sample(prompt, params, stops)
    assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
    assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-5
    assert remote.describe()["weight_version"] == "w1" and remote.describe()["token_exact"] is True
    await remote.aclose()
    await local.aclose()


async def test_completions_sampler_turns_garbage_into_policy_errors() -> None:
    def garbage(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/v1/completions") and b'"seed":1' in request.content:
            return httpx.Response(
                200, json={"choices": [{"token_ids": [1, 2], "logprobs": {"token_logprobs": [0.1]}}]}
            )
        if b'"seed":2' in request.content:
            return httpx.Response(200, text="not json")
        if b'"seed":3' in request.content:
            return httpx.Response(
                200, json={"choices": [{"token_ids": [], "logprobs": {"token_logprobs": []}}]}
            )
        return httpx.Response(400, json={"error": {"message": "bad"}})

    sampler = CompletionsSampler("http://x", "m", transport=httpx.MockTransport(garbage))
    for seed, why in ((1, "one for one"), (2, "not JSON"), (3, "empty"), (4, "refused")):
        with pytest.raises(PolicyError, match=why):
            await sampler.sample([1], SamplingParams(seed=seed), [])
    await sampler.aclose()


async def test_a_random_tiny_policy_over_http_keeps_the_token_invariants(
    policy: httpx.AsyncClient, gym_client: GymClient, tiny_tokenizer: Any
) -> None:
    transport = httpx.ASGITransport(app=policy.app)  # type: ignore[attr-defined]
    sampler = CompletionsSampler("http://policy", "tiny", transport=transport)
    renderer = ChatRenderer(tiny_tokenizer)
    config = DriverConfig(
        max_completion_tokens=96, max_turns=3, sampling=SamplingParams(max_tokens=32, seed=0)
    )
    rollouts = await RolloutDriver(gym_client, sampler, renderer, config).run_group(
        EpisodeSpec("counter", "counter-0000", seed=1), 3
    )
    for rollout in rollouts:
        assert len(rollout.logprobs) == len(rollout.completion_ids) == len(rollout.env_mask) <= 96
        assert all(lp < 0 for lp, m in zip(rollout.logprobs, rollout.env_mask, strict=True) if m)
        assert rollout.failure is None and rollout.reward is not None
        text = renderer.decode(rollout.prompt_ids + rollout.completion_ids)
        assert text.startswith(renderer.render_prompt(rollout.transcript[:2], rollout.tools).text)
    await sampler.aclose()


def _serve_policy() -> tuple[subprocess.Popen[bytes], int, dict[str, Any]]:
    """`gym-server policy serve` on a free port, once it answers `/v1/models`: the process, its port and
    that answer. The port is free when picked but the server binds it only after loading torch (seconds):
    another test's server may take it meanwhile, which answers for it (not 200) and makes this one exit
    unable to bind; then it starts again on another port."""
    for _ in range(3):
        port = free_port()
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from gym_server.cli.policy import app; app()",
                "serve",
                "--port",
                str(port),
                "--threads",
                "1",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 180  # a cold start imports torch and transformers
        while process.poll() is None:
            assert time.monotonic() < deadline, "policy server did not start within 180 s"
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1)
            except httpx.TransportError:
                answer = None
            if answer is not None and answer.status_code == 200:
                return process, port, answer.json()
            time.sleep(0.1)
        output = process.stdout.read().decode(errors="replace") if process.stdout else ""
        assert "address already in use" in output.lower(), output  # any other exit is the test's failure
    raise AssertionError("three ports in a row were taken before the policy server could bind one")


@pytest.mark.slow
def test_policy_serve_command(tmp_path: Path) -> None:
    process, port, models = _serve_policy()
    try:
        assert models["data"][0]["id"] == "tiny"
        answer = httpx.post(
            f"http://127.0.0.1:{port}/v1/completions",
            json={"prompt": [65, 66], "max_tokens": 4, "return_token_ids": True, "logprobs": 0},
            timeout=30,
        ).json()
        assert len(answer["choices"][0]["token_ids"]) == len(
            answer["choices"][0]["logprobs"]["token_logprobs"]
        )
    finally:
        process.terminate()
        process.wait(timeout=20)
