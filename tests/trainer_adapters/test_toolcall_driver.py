"""The driver reads every tool-call format from sampled tokens and steps a real gym with the calls.

A scripted tiny-tokenizer policy writes a counter episode in the formats of other model families (the
driver detects each turn's format), a malformed call is recorded as an invalid tool call, and a
tokenizer that declares a response template has its turns read by transformers' `parse_response`.
"""

from __future__ import annotations

from typing import Any

import pytest

from gym_trainer.chat import ChatRenderer
from gym_trainer.client import GymClient
from gym_trainer.driver import DriverConfig, EpisodeSpec, RolloutDriver
from gym_trainer.toolcalls import render_tool_call


def counter_start(task_id: str, seed: int) -> int:
    import random

    return random.Random(f"{task_id}\x00{seed}").randint(0, 20)


async def test_an_episode_in_several_formats_is_solved(
    gym_client: GymClient, tiny_tokenizer: Any, renderer: ChatRenderer, scripted: Any
) -> None:
    amount = 26 - counter_start("counter-0000", 3) - 10
    script = [
        "<tool_call>\n<function=read>\n</function>\n</tool_call>",  # Qwen3-Coder XML
        "[add(amount=10)]",  # pythonic
        f"<tool_call>\n<function=add>\n<parameter=amount>\n{amount}\n</parameter>\n</function>\n</tool_call>",
        '{"name": "submit", "parameters": {}}',  # Llama 3 JSON
    ]
    config = DriverConfig(run="formats")
    rollout = await RolloutDriver(gym_client, scripted(tiny_tokenizer, script), renderer, config).run_episode(
        EpisodeSpec("counter", "counter-0000", seed=3)
    )
    assert rollout.parse_errors == 0
    assert rollout.reward == 1.0 and rollout.stop_reason == "done"
    calls = [m["tool_calls"][0]["function"] for m in rollout.transcript if m.get("tool_calls")]
    assert [c["name"] for c in calls] == ["read", "add", "add", "submit"]
    assert calls[2]["arguments"] == f'{{"amount": {amount}}}'  # typed by the tool's schema


async def test_a_named_format_and_an_invalid_call_are_recorded(
    gym_client: GymClient, tiny_tokenizer: Any, renderer: ChatRenderer, scripted: Any
) -> None:
    sampler = scripted(tiny_tokenizer, ["[read()]", "[add(10)]"])
    config = DriverConfig(run="formats", tool_format="pythonic")
    driver = RolloutDriver(gym_client, sampler, renderer, config)
    assert driver.parser.format == "pythonic"
    rollout = await driver.run_episode(EpisodeSpec("counter", "counter-0001"))
    assert rollout.parse_errors == 1 and rollout.failure is None
    assert rollout.transcript[-1]["content"] == "[add(10)]"  # sent as text, scored as an answer
    stored = await gym_client.wait_for_rollout(rollout.session_id or "")
    assert "positional" in stored["turns"][1]["parse_error"]


async def test_a_tokenizers_response_template_reads_the_turns(gym_client: GymClient, scripted: Any) -> None:
    """transformers' `parse_response` with TRL's Qwen3 response template reads the tiny policy's turns
    (ChatML with Hermes calls, as Qwen3 writes them): the episode is solved through it."""
    chat_template_utils = pytest.importorskip("trl.chat_template_utils")
    from gym_trainer.models import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer()
    tokenizer.response_template = chat_template_utils.qwen3_template
    renderer = ChatRenderer(tokenizer)
    start = counter_start("counter-0000", 3)
    script = [
        "Reading first.\n" + render_tool_call("read", {}),
        render_tool_call("add", {"amount": 10}),
        render_tool_call("add", {"amount": 26 - start - 10}),
        render_tool_call("submit", {}),
    ]
    driver = RolloutDriver(gym_client, scripted(tokenizer, script), renderer, DriverConfig(run="template"))
    assert driver.parser.template is not None
    rollout = await driver.run_episode(EpisodeSpec("counter", "counter-0000", seed=3))
    assert rollout.reward == 1.0 and rollout.parse_errors == 0
    assert rollout.transcript[2]["content"] == "Reading first."
