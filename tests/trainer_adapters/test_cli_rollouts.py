"""`gym-server eval` and `gym-server rollout` against a gym server process and the tiny policy server."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import typer
from conftest import ServerProcess
from gymtest import stored_run
from typer.testing import CliRunner

from gym_server.cli.rollouts import confidence_interval, evaluate, rollout
from gym_trainer.toolcalls import render_tool_call

pytestmark = pytest.mark.slow

app = typer.Typer()
app.command("eval")(evaluate)
app.command("rollout")(rollout)


def test_confidence_interval() -> None:
    assert confidence_interval([1.0]) == 0.0
    assert confidence_interval([0.0, 1.0, 0.0, 1.0]) == pytest.approx(1.96 * (1 / 3) ** 0.5 / 2)


def test_eval_resumes_and_rollout_writes_token_data(
    server_factory: Callable[..., ServerProcess], tmp_path: Path, policy_url: str
) -> None:
    server = server_factory(f"sqlite:///{tmp_path / 'gym.db'}", GYM_LOG_LEVEL="warning")
    server.start()
    out = tmp_path / "eval.jsonl"
    args = ["eval", "counter", "--gym", server.url, "--policy", policy_url, "--limit", "2", "-n", "2"]
    args += ["--max-tokens", "16", "--max-turns", "2", "--output", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "mean reward" in result.output and "success rate" in result.output
    assert "reached" in result.output and "submitted" in result.output  # per-component means
    lines = out.read_bytes().splitlines()
    assert len(lines) == 4
    first = orjson.loads(lines[0])
    assert {"task_id", "sample", "reward", "stop_reason"} <= set(first) and "completion_ids" not in first
    # Interrupted runs resume: a half-written last line is dropped and that episode played again.
    out.write_bytes(b"\n".join(lines[:3]) + b"\n" + lines[3][:10])
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    records = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert len(records) == 4
    assert sorted((r["task_id"], r["sample"]) for r in records) == sorted(
        (orjson.loads(line)["task_id"], orjson.loads(line)["sample"]) for line in lines
    )
    # Only the cut episode was played again: 4 + 1 sessions in the gym, not 4 + 4.
    evaluated = stored_run(server.url, "eval-counter-validation", 5)
    assert evaluated["total"] == 5
    # Marked as evaluation, so `gym-server export` leaves them out of training data.
    assert {item["metadata"].get("purpose") for item in evaluated["items"]} == {"evaluation"}

    data = tmp_path / "rollouts.jsonl"
    collected = CliRunner().invoke(
        app,
        [
            *["rollout", "counter", "--gym", server.url, "--policy", policy_url, "--limit", "1", "-n", "3"],
            *["--max-tokens", "16", "--max-turns", "2", "--output", str(data), "--run", "collect"],
        ],
    )
    assert collected.exit_code == 0, collected.output
    rows = [orjson.loads(line) for line in data.read_bytes().splitlines()]
    assert len(rows) == 3
    for row in rows:
        assert len(row["completion_ids"]) == len(row["logprobs"]) == len(row["env_mask"]) > 0
        assert row["prompt_ids"]
    # The same episodes are in the store under the run (their tokens: see the scripted test below).
    stored = stored_run(server.url, "collect", 3)
    assert {item["id"] for item in stored["items"]} == {row["session_id"] for row in rows}
    assert all("purpose" not in item["metadata"] for item in stored["items"])  # training data


def test_rollout_stores_the_tokens_it_writes(
    server_factory: Callable[..., ServerProcess], tmp_path: Path, fake_vllm: Any
) -> None:
    """With a scripted policy (the vLLM stand-in), every turn reaches the gym, a turn cut at the token
    budget included, so the stored turns must rebuild exactly the JSONL's prompt and completion ids and
    logprobs."""
    server = server_factory(f"sqlite:///{tmp_path / 'gym.db'}", GYM_LOG_LEVEL="warning")
    server.start()
    # One episode at a time: the first submits, the second is cut in its second turn.
    fake_vllm.script = [render_tool_call("read", {}), render_tool_call("submit", {})]
    fake_vllm.script += [render_tool_call("read", {}), "!endless"]
    data = tmp_path / "rollouts.jsonl"
    args = ["rollout", "counter", "--gym", server.url, "--policy", fake_vllm.url, "--model", "counter-lora"]
    args += ["--limit", "1", "-n", "2", "--concurrency", "1", "--output", str(data), "--run", "scripted"]
    collected = CliRunner().invoke(app, args)
    assert collected.exit_code == 0, collected.output
    rows = [orjson.loads(line) for line in data.read_bytes().splitlines()]
    stored = {item["id"]: item for item in stored_run(server.url, "scripted", 2)["items"]}
    assert len(rows) == 2 and set(stored) == {row["session_id"] for row in rows}
    assert sorted(row["stop_reason"] for row in rows) == ["done", "max_completion_tokens"]
    for row in rows:
        assert row["num_turns"] == 2
        turns = stored[row["session_id"]]["turns"]
        cut = row["stop_reason"] == "max_completion_tokens"
        assert [bool(turn.get("truncated")) for turn in turns] == [False, cut]
        assert turns[0]["prompt_ids"] == row["prompt_ids"]
        assert [t for turn in turns for t in turn["env_ids"] + turn["completion_ids"]] == row[
            "completion_ids"
        ]
        model_logprobs = [lp for lp, m in zip(row["logprobs"], row["env_mask"], strict=True) if m]
        assert [lp for turn in turns for lp in turn["logprobs"]] == model_logprobs
        assert stored[row["session_id"]]["policy"]["model"] == "counter-lora"


def test_an_interrupted_eval_closes_its_open_episode_and_resumes(
    server_factory: Callable[..., ServerProcess], tmp_path: Path, fake_vllm: Any
) -> None:
    """Ctrl-C for real: `gym-server eval` in its own process, interrupted while the policy is busy."""
    server = server_factory(f"sqlite:///{tmp_path / 'gym.db'}", GYM_LOG_LEVEL="warning")
    server.start()
    submit = render_tool_call("submit", {})
    fake_vllm.script = [submit, submit, "!hang"]
    out = tmp_path / "eval.jsonl"
    args = ["eval", "counter", "--gym", server.url, "--policy", fake_vllm.url, "--model", "base"]
    args += ["--limit", "4", "--concurrency", "1", "--output", str(out), "--run", "interrupted"]
    command = [sys.executable, "-c", "from gym_server.cli.main import app; app()", *args]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while len(fake_vllm.requests) < 3:  # two episodes done, the third waiting for the policy
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()[0]
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        output = process.communicate(timeout=30)[0].decode()
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, output
    assert "run again to resume" in " ".join(output.split())  # rich wraps lines
    assert len(out.read_bytes().splitlines()) == 2
    # The interrupted episode's session was closed, not left live until its TTL.
    assert httpx.get(f"{server.url}/readyz").json()["live_sessions"] == 0, output

    fake_vllm.script = [submit, submit]
    resumed = CliRunner().invoke(app, args)
    assert resumed.exit_code == 0, resumed.output
    records = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert len(records) == 4 and len({r["task_id"] for r in records}) == 4
    assert not fake_vllm.script and len(fake_vllm.requests) == 5  # only the two missing episodes ran
    statuses = sorted(item["status"] for item in stored_run(server.url, "interrupted", 5)["items"])
    assert statuses == ["abandoned", "completed", "completed", "completed", "completed"]
