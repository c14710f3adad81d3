"""`gym-server eval` and `gym-server rollout` against a gym server process and the tiny policy server."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
import typer
from conftest import ServerProcess
from typer.testing import CliRunner

from gym_server.cli.rollouts import confidence_interval, evaluate, rollout

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
