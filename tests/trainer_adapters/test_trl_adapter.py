"""The TRL adapter's pieces without a trainer: `GymRolloutFunc` output contract, the reward functions,
and the `environment_factory` whose methods are bound from the gym's tool schemas."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import ServerProcess

from gym_trainer.toolcalls import render_tool_call
from gym_trainer.trl import (
    GymRolloutFunc,
    gym_component_reward,
    gym_prompt,
    gym_reward,
    make_environment_factory,
)

pytestmark = pytest.mark.slow


@pytest.fixture
def gym_url(server_factory: Callable[..., ServerProcess], tmp_path: Path) -> str:
    server = server_factory(f"sqlite:///{tmp_path / 'gym.db'}", GYM_LOG_LEVEL="warning")
    server.start()
    return server.url


def fake_trainer(tokenizer: Any, step: int = 4) -> Any:
    args = SimpleNamespace(max_completion_length=48, temperature=1.0, top_p=1.0)
    return SimpleNamespace(args=args, state=SimpleNamespace(global_step=step), processing_class=tokenizer)


def test_rollout_func_returns_trl_fields_in_prompt_order(
    gym_url: str, tiny_tokenizer: Any, scripted: Any
) -> None:
    a = gym_prompt("counter", "Bring the counter to 26, then submit.", task_id="counter-0000")
    b = gym_prompt("counter", "Bring the counter to -16, then submit.", task_id="counter-0001", seed=9)
    missing = gym_prompt("counter", "?", task_id="no-such-task")
    prompts = [a] * 3 + [b] * 3 + [missing]
    sampler = scripted(tiny_tokenizer, [render_tool_call("submit", {})] * 7)
    rollout = GymRolloutFunc(gym_url, sampler=sampler, max_turns=2, run="trl-unit", concurrency=4)
    out = rollout(prompts, fake_trainer(tiny_tokenizer))
    assert set(out) >= {"prompt_ids", "completion_ids", "logprobs", "env_mask", "gym_reward"}
    assert all(len(values) == 7 for values in out.values())
    episodes = rollout.last_rollouts
    assert [e.task_id for e in episodes[:6]] == ["counter-0000"] * 3 + ["counter-0001"] * 3
    assert len({e.seed for e in episodes[:3]}) == 1 and {e.seed for e in episodes[3:6]} == {9}
    for i in range(6):
        assert len(out["completion_ids"][i]) == len(out["logprobs"][i]) == len(out["env_mask"][i])
        assert out["completion_ids"][i][-1] == tiny_tokenizer.eos_token_id
        assert out["gym_stop_reason"][i] == "done" and out["gym_reward"][i] == 0.0
    # The unknown task: no session, a masked one-token completion, and no signal.
    assert out["gym_failure"][6] == "gym_error" and out["gym_reward"][6] is None
    assert out["completion_ids"][6] == [tiny_tokenizer.eos_token_id] and out["env_mask"][6] == [0]
    assert out["prompt_ids"][6]  # rendered from the dataset prompt
    assert sampler.weight_version == "4"
    rewards = gym_reward(prompts, [None] * 7, **{k: v for k, v in out.items() if k.startswith("gym_")})
    assert rewards[:6] == [0.0] * 6 and rewards[6] is None
    submitted = gym_component_reward("submitted")(prompts, [None] * 7, **out)
    assert submitted[:6] == [1.0] * 6 and submitted[6] is None
    assert rollout.history[-1]["stop_reasons"] == {"done": 6, "gym_error": 1}
    rollout.close()


def test_environment_factory_binds_gym_tools(gym_url: str) -> None:
    from transformers.utils.chat_template_utils import get_json_schema

    factory = make_environment_factory(gym_url, "counter", run="trl-env")
    env = factory()
    schemas = {name: get_json_schema(getattr(env, name)) for name in ("read", "add", "submit")}
    assert schemas["add"]["function"]["parameters"]["properties"]["amount"]["type"] == "integer"
    assert schemas["add"]["function"]["parameters"]["required"] == ["amount"]
    assert (
        "between -10 and 10"
        in schemas["add"]["function"]["parameters"]["properties"]["amount"]["description"]
    )
    assert env.reset(prompt=gym_prompt("counter", "x", task_id="counter-0002", seed=4)) is None
    value = int(env.read())  # type: ignore[attr-defined]
    target = int(env.messages[1]["content"].split("to ")[1].split(",")[0])
    while value != target:
        value = int(env.add(amount=max(-10, min(10, target - value))))  # type: ignore[attr-defined]
    assert env.add(amount=99).startswith("Error: amount must be")  # type: ignore[attr-defined]
    assert env.submit().startswith("submitted")  # type: ignore[attr-defined]
    assert env.add(amount=1) == "error: the episode is over"  # type: ignore[attr-defined]
    assert env.get_reward() == 1.0
    assert env.get_reward() is None  # closed: nothing to score


def test_environment_factory_gives_no_signal_when_the_gym_dies(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    server = server_factory(f"sqlite:///{tmp_path / 'gym.db'}", GYM_LOG_LEVEL="warning")
    server.start()
    env = make_environment_factory(server.url, "counter", run="trl-env-dies")()
    # Rows may name their task in columns as well as in the first prompt message.
    assert env.reset(prompt=[{"role": "user", "content": "x"}], task_id="counter-0001", seed=3) is None
    assert int(env.read())  # type: ignore[attr-defined]
    server.kill()
    reply = env.add(amount=1)  # type: ignore[attr-defined]
    assert reply.startswith("error:") and env.failure is not None
    assert env.submit().startswith("error: the gym failed this episode")  # type: ignore[attr-defined]
    assert env.get_reward() is None  # no signal, not a zero
    # A new episode on a dead gym does not raise into the trainer: its tools say so, its reward is None.
    assert env.reset(prompt=[{"role": "user", "content": "x"}], task_id="counter-0001") is None
    assert env.failure is not None and env.read().startswith("error:")  # type: ignore[attr-defined]
    assert env.get_reward() is None


def test_hermes_response_template_lets_trl_parse_the_gyms_tool_calls() -> None:
    pytest.importorskip("trl")
    from trl.chat_template_utils import parse_response

    from gym_trainer.models import build_tiny_tokenizer
    from gym_trainer.trl import use_hermes_response_template

    tokenizer = use_hermes_response_template(build_tiny_tokenizer())
    prefix = tokenizer.apply_chat_template(
        [{"role": "user", "content": "go"}], tokenize=True, add_generation_prompt=True, return_dict=False
    )
    text = render_tool_call("add", {"amount": 3}) + render_tool_call("submit", {})
    ids = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
    parsed = parse_response(tokenizer, ids, prefix=prefix)
    assert [c["function"] for c in parsed["tool_calls"]] == [
        {"name": "add", "arguments": {"amount": 3}},
        {"name": "submit", "arguments": {}},
    ]
    other = build_tiny_tokenizer()
    other.chat_template = "{{ messages }}"
    with pytest.raises(ValueError, match="HERMES_TEMPLATE"):
        use_hermes_response_template(other)
