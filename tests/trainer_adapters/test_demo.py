"""`gym-server demo --model tiny`: evaluation before and after GRPO, a table, a PNG curve and a record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from gym_server.cli.demo import _check_shaping_components, demo

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")


def run_demo(*args: str) -> Any:
    app = typer.Typer()
    app.command()(demo)
    return CliRunner().invoke(app, list(args))


@pytest.mark.slow
def test_tiny_demo_runs_end_to_end(tmp_path: Path) -> None:
    pytest.importorskip("trl")
    mlflow = pytest.importorskip("mlflow")
    result = run_demo("--model", "tiny", "--steps", "2", "--output", str(tmp_path), "--tracker", "mlflow")
    assert result.exit_code == 0, result.output
    assert "success rate" in result.output
    png = (tmp_path / "reward_curve.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    record = json.loads((tmp_path / "demo.json").read_text())
    assert record["before"]["episodes"] == record["after"]["episodes"] == 32
    assert len(record["train_reward_per_step"]) == 2
    # The tracker got the held-out evaluations (steps 0 and 2) and each GRPO step's episodes.
    client = mlflow.MlflowClient(tracking_uri=(tmp_path / "tracking" / "mlruns").as_uri())
    experiment = client.get_experiment_by_name("gym-server-demo")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED"
    evals = client.get_metric_history(run.info.run_id, "eval/episodes")
    assert [(m.step, m.value) for m in evals] == [(0, 32.0), (2, 32.0)]
    train = client.get_metric_history(run.info.run_id, "gym/episodes")
    assert sorted(m.step for m in train) == [0, 1]
    invalid = client.get_metric_history(run.info.run_id, "gym/invalid_tool_call_rate")
    assert len(invalid) == 2 and all(0.0 <= m.value <= 1.0 for m in invalid)
    mean = client.get_metric_history(run.info.run_id, "eval/reward_mean")
    assert [m.value for m in mean] == pytest.approx(
        [record["before"]["mean_reward"], record["after"]["mean_reward"]]
    )


@pytest.mark.parametrize("shaping", ["extracted", "extracted=lots"])
def test_a_malformed_shaping_weight_is_refused_before_anything_starts(tmp_path: Path, shaping: str) -> None:
    pytest.importorskip("trl")
    result = run_demo("--model", "tiny", "--shaping", shaping, "--output", str(tmp_path / "out"))
    assert result.exit_code == 2
    assert "COMPONENT=WEIGHT" in result.output
    assert not (tmp_path / "out").exists()  # refused before a gym, a model or the output folder


def test_a_component_the_verifier_never_reports_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """Checked on the before-training evaluation: a misspelt component would otherwise train on 0."""
    reported = {"correct": 0.1, "extracted": 0.3}
    _check_shaping_components({"extracted": 0.5}, reported, "chain_sum")  # known: passes
    with pytest.raises(typer.Exit) as refused:
        _check_shaping_components({"extracted": 0.5, "extractd": 0.5}, reported, "chain_sum")
    assert refused.value.exit_code == 2
    message = " ".join(capsys.readouterr().err.split())
    assert "--shaping names extractd" in message and "it reports: correct, extracted" in message


def test_an_environment_the_gym_lacks_is_named_before_the_model_loads(tmp_path: Path) -> None:
    pytest.importorskip("peft")
    result = run_demo("--model", "smollm2", "--env", "reasoning_gym/no_such_task", "--output", str(tmp_path))
    assert result.exit_code == 2
    assert "no environment 'reasoning_gym/no_such_task'" in result.output
    assert "gym-server[reasoning-gym]" in result.output
