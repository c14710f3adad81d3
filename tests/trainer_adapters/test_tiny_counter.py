"""`tiny-counter` (issue 37, item 15): the offline policy of the agent docs' examples calls tools. Built
the way `gym-server policy serve --model tiny-counter` builds it (once, under `$GYM_HOME/models/`), served
by the bundled policy server, and played through an episode gateway as the docs' raw OpenAI loop does:
it makes tool calls over `mcp_url` and reaches the target of the docs' task."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import AppHarness, serving
from gateway_helpers import open_episode
from mcptest import open_session

pytest.importorskip("transformers")

from gym_server.cli import policy as policy_cli

pytestmark = [pytest.mark.slow, pytest.mark.heavy, pytest.mark.timeout(1800)]

# The docs' example episode: counter-0013 (target 14) starts at 11 with seed 0, 3 below the target.
TASK, SEED = "counter-0013", 0


@pytest.fixture(scope="module")
def tiny_counter_url() -> Iterator[str]:
    from gym_trainer.agents.policy import ServedPolicy
    from gym_trainer.models import load_policy

    folder = policy_cli.tiny_counter(seed=0)  # built into this session's $GYM_HOME (tests/conftest.py)
    model, tokenizer = load_policy(str(folder))
    with ServedPolicy(model, tokenizer, name=policy_cli.TINY_COUNTER) as served:
        yield served.base_url


def test_it_is_built_once_and_then_loaded_from_its_folder(
    tiny_counter_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gym_trainer.models

    def rebuild(*args: object, **kwargs: object) -> Path:
        raise AssertionError("tiny-counter was built again")

    monkeypatch.setattr(gym_trainer.models, "export_tiny_counter", rebuild)
    folder = policy_cli.tiny_counter(seed=0)
    assert (folder / "config.json").is_file() and folder.name.startswith("tiny-counter-seed0-")


async def play(gym: AppHarness, upstream: str, rounds: int = 4) -> tuple[dict[str, Any], list[str]]:
    """One gateway episode of the docs' task, played by a plain OpenAI loop: (the session, tools called)."""
    episode = await open_episode(gym, upstream, task_id=TASK, seed=SEED, model=policy_cli.TINY_COUNTER)
    base, mcp = episode["gateway"]["base_url"], await open_session(gym.client, episode["gateway"]["mcp_url"])
    messages, called = list(episode["messages"]), []
    for _ in range(rounds):
        request = {"messages": messages, "tools": episode["tools"], "max_tokens": 48, "seed": 0}
        answer = await gym.client.post(f"{base}/chat/completions", json=request)
        assert answer.status_code == 200, answer.text
        message = answer.json()["choices"][0]["message"]
        messages.append({key: message[key] for key in ("role", "content", "tool_calls") if key in message})
        done = False
        for call in message.get("tool_calls") or []:
            function = call["function"]
            result = await mcp.call(function["name"], json.loads(function["arguments"] or "{}"))
            called.append(function["name"])
            text = result["result"]["content"][0]["text"]
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": text})
            done = done or result["result"]["_meta"]["gym-server/episode"]["done"]
        if done or not message.get("tool_calls"):
            break
    state = (await gym.client.get(f"/v1/sessions/{episode['session_id']}")).json()
    return state, called


async def test_a_gateway_episode_makes_tool_calls_and_scores(tmp_path: Path, tiny_counter_url: str) -> None:
    async with serving(tmp_path) as gym:
        state, called = await play(gym, tiny_counter_url)
    assert called and called[0] == "add", called
    assert state["done"] is True and state["reward"] > 0.0, (state, called)
