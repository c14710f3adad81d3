"""verifiers 0.4 plays gym-server environments through the `gym-server-verifiers` taskset plugin.

Everything is real: verifiers' loader, its eval runner (`run_eval`, what `vf-eval` runs) and CLI, its
chat harness (a `uv` script in a subprocess runtime), its interception server and MCP tool server,
and `gym-server serve`. The policy is the gym's own CPU policy server (a tiny random model) where a
random model suffices, and a scripted tool-calling responder (`scripted_policy.py`) where the test
needs tool calls a random model does not make.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gym_server_verifiers
import pytest
import verifiers.v1 as vf
from conftest import Gym, free_port
from gym_server_verifiers import GymError, GymHarness, GymTaskset
from scripted_policy import BAD_ARGUMENTS, serve_scripted_policy
from verifiers.v1.cli.eval.runner import run_eval
from verifiers.v1.configs.cli.eval import EvalConfig

EvalData = Callable[..., dict[str, Any]]


def evaluate(data: dict[str, Any]) -> list[vf.Trace]:
    """One evaluation through verifiers' own runner; the traces of its episodes."""
    episodes = asyncio.run(run_eval(EvalConfig.model_validate(data)))
    return [trace for episode in episodes for trace in episode.traces]


def tool_calls(trace: vf.Trace) -> list[tuple[str, Any]]:
    return [
        (call.name, json.loads(call.arguments))
        for message in trace.messages
        if message.role == "assistant"
        for call in message.tool_calls or []
    ]


def stored_tool_calls(stored: dict[str, Any]) -> list[tuple[str, Any]]:
    return [
        (call["function"]["name"], json.loads(call["function"]["arguments"]))
        for message in stored["messages"]
        if message["role"] == "assistant"
        for call in message.get("tool_calls") or []
    ]


def test_vf_load_environment_finds_the_taskset_and_lists_the_gyms_tasks(gym: Gym) -> None:
    config = vf.resolve_env_config(
        {
            "taskset": {
                "id": "gym-server-verifiers",
                "env": "counter",
                "seeds": [0, 7],
                "task": {"base_url": gym.url},
            }
        }
    )
    env = vf.load_environment(config)
    assert isinstance(env.taskset, GymTaskset)
    # The taskset's default program is its own harness (the gym's tools only), not verifiers' `bash`.
    assert {h.id for h in config.agent_harnesses().values()} == {"gym-server-verifiers"}
    assert vf.utils.loaders.harness_class("gym-server-verifiers") is GymHarness

    status, page = gym.get("/v1/environments/counter/tasks?limit=1000")
    assert status == 200
    rows = list(env.taskset)
    assert len(rows) == 2 * page["total"]
    assert [(t.data.task_id, t.data.seed) for t in rows] == [
        (t["id"], s) for t in page["tasks"] for s in (0, 7)
    ]
    assert rows[0].data.prompt == page["tasks"][0]["prompt"]

    # The keyword form: one task, its agent in a local subprocess.
    env = gym_server_verifiers.load_environment(gym.url, "counter", task_ids=["counter-0003"], seeds=[2])
    [row] = list(env.taskset)
    assert (row.data.task_id, row.data.seed, row.key) == ("counter-0003", 2, "counter/counter-0003@2")
    assert env.config.agent.runtime.type == "subprocess"


def test_scripted_tool_calls_are_gym_steps_and_rewards_are_the_gyms(gym: Gym, eval_config: EvalData) -> None:
    """Scripted policy (`scripted_policy.py`: read, a bad `add`, adds to the target, submit); verifiers
    and the gym are real. Each tool call is one gym step; the bad argument gets the gym's own error as
    the tool result and the episode goes on to its end; the reward is the stored trajectory's."""
    with serve_scripted_policy() as url:
        data = eval_config(gym, url, "scripted", run="vf-scripted", task_ids=["counter-0000", "counter-0001"])
        traces = evaluate(data)
    assert len(traces) == 2
    for trace in traces:
        assert trace.ok and trace.stop_condition == "episode_over", trace.errors
        stored = gym.stored(trace.info["gym"]["session_id"], "completed")
        assert (stored["done_reason"], stored["run"]) == ("submitted", "vf-scripted")
        assert trace.rewards["gym"] is not None
        assert trace.rewards["gym"].score == stored["reward"] == 1.0
        assert trace.info["gym"]["components"] == stored["components"]
        assert stored["policy"] == {"model": "scripted"}
        # The model was offered exactly the session's tools, and every call it made is a stored step.
        assert {tool.name for tool in trace.tools} == {tool["function"]["name"] for tool in stored["tools"]}
        calls = tool_calls(trace)
        assert stored_tool_calls(stored) == calls
        assert trace.metrics["gym_steps"] == stored["num_turns"] == len(calls)
        assert calls[0] == ("read", {}) and calls[1] == ("add", BAD_ARGUMENTS) and calls[-1] == ("submit", {})

        messages = stored["messages"]
        bad = next(
            i for i, m in enumerate(messages) if m.get("tool_calls") and "lots" in str(m["tool_calls"])
        )
        gym_error = messages[bad + 1]["content"]
        assert messages[bad + 1]["role"] == "tool" and gym_error.startswith(
            "Error: invalid arguments for 'add'"
        )
        assert [m.content for m in trace.messages if m.role == "tool"][1] == gym_error

    # verifiers' own record of the run: one episode a line
    lines = (Path(data["output_dir"]) / "vf-scripted" / "traces.jsonl").read_text().splitlines()
    recorded = [json.loads(line)["traces"][0] for line in lines]
    assert sorted(trace["rewards"]["gym"]["score"] for trace in recorded) == [1.0, 1.0]


def test_the_gyms_tiny_policy_evaluated_through_verifiers(
    gym: Gym, tiny_policy: str, eval_config: EvalData
) -> None:
    """A real OpenAI-compatible policy (random weights): whatever it says is played in the gym, its
    final plain-text reply as the episode's last step, and scored by the gym's verifier."""
    data = eval_config(gym, tiny_policy, "tiny", run="vf-tiny", task_ids=["counter-0002", "counter-0003"])
    traces = evaluate(data)
    assert len(traces) == 2
    for trace in traces:
        assert trace.ok, trace.errors
        # Its random text is the episode's answer: `counter` ends on it ("answered").
        stored = gym.stored(trace.info["gym"]["session_id"], "completed")
        assert trace.rewards["gym"] is not None
        assert trace.rewards["gym"].score == stored["reward"]
        assert stored["run"] == "vf-tiny" and stored["policy"] == {"model": "tiny"}
        assert trace.metrics["gym_steps"] == stored["num_turns"] >= 1
        assert stored_tool_calls(stored) == tool_calls(trace)
        last = trace.messages[-1]
        if last.role == "assistant" and not last.tool_calls:  # its final answer is the last step
            assert [m for m in stored["messages"] if m["role"] == "assistant"][-1]["content"] == last.content


def test_vf_eval_cli_runs_offline_on_a_local_policy(gym: Gym, tmp_path: Path) -> None:
    """Scripted policy; the `vf-eval` command line, as a user types it, against local URLs only."""
    with serve_scripted_policy() as url:
        # fmt: off
        args = [
            "gym-server-verifiers", "--env.taskset.env", "counter", "--env.taskset.task-ids", "counter-0004",
            "--env.taskset.seeds", "3", "--env.taskset.task.base-url", gym.url,
            "--env.taskset.task.run", "vf-cli", "--env.agent.runtime.type", "subprocess",
            "--model", "scripted", "--client.base-url", url, "--client.api-key-var", "GYM_INTEROP_POLICY_KEY",
            "--no-push", "--no-rich", "-o", str(tmp_path), "--run.name", "cli",
        ]
        # fmt: on
        vf_eval = Path(sys.executable).parent / "vf-eval"
        done = subprocess.run([vf_eval, *args], capture_output=True, text=True, timeout=240, env=os.environ)
    assert done.returncode == 0, done.stderr[-4000:]
    [line] = (tmp_path / "cli" / "traces.jsonl").read_text().splitlines()
    [trace] = json.loads(line)["traces"]
    stored = gym.stored(trace["info"]["gym"]["session_id"], "completed")
    assert (stored["task_id"], stored["seed"], stored["run"]) == ("counter-0004", 3, "vf-cli")
    assert trace["rewards"]["gym"]["score"] == stored["reward"] == 1.0


def test_an_unreachable_or_refusing_gym_is_an_error_not_a_zero(gym: Gym) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(GymError, match="gym unreachable"):
        list(gym_server_verifiers.load_environment(nowhere, "counter").taskset)
    with pytest.raises(GymError, match="404"):
        list(gym_server_verifiers.load_environment(gym.url, "no-such-env").taskset)
    with pytest.raises(ValueError, match="no tasks"):
        list(gym_server_verifiers.load_environment(gym.url, "counter", task_ids=["nope"]).taskset)


def test_a_gym_that_dies_mid_rollout_leaves_the_rollout_without_reward(
    gym_with: Callable[..., Gym], eval_config: EvalData
) -> None:
    """Scripted policy; the gym is killed before the third model turn, so that turn's tool call
    cannot be stepped: the rollout stops, and scoring records the error instead of a reward."""

    doomed = gym_with()

    def kill_gym(turn: int) -> None:
        if turn == 2:
            doomed.process.kill()
            doomed.process.wait()

    with serve_scripted_policy(before_turn=kill_gym) as url:
        [trace] = evaluate(eval_config(doomed, url, "scripted", run="vf-dies", task_ids=["counter-0000"]))
    assert trace.rewards["gym"] is None and not trace.ok
    assert trace.info["gym"]["error"].startswith("gym unreachable")
    assert any("no reward: gym unreachable" in error.message for error in trace.errors)
    assert trace.stop_condition is not None


def test_a_rollout_whose_policy_breaks_is_stored_as_a_policy_error(gym: Gym, eval_config: EvalData) -> None:
    """Scripted policy that fails (HTTP 500) on its second turn: verifiers skips `finalize` for a
    failed rollout, and the plugin's harness closes the episode with the gym's `policy_error` class."""

    def break_policy(turn: int) -> None:
        if turn == 1:
            raise RuntimeError("the policy broke")

    with serve_scripted_policy(before_turn=break_policy) as url:
        [trace] = evaluate(eval_config(gym, url, "scripted", run="vf-broken", task_ids=["counter-0005"]))
    assert not trace.ok and trace.rewards.get("gym") is None
    stored = gym.stored(trace.info["gym"]["session_id"], "failed")
    assert (stored["failure"], stored["reward"]) == ("policy_error", None)
    assert stored_tool_calls(stored) == [("read", {})]
