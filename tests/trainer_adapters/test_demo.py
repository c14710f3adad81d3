"""`gym-server demo --model tiny`: evaluation before and after GRPO, a table, a PNG curve and a record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gym_server.cli.demo import demo

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")]


def test_tiny_demo_runs_end_to_end(tmp_path: Path) -> None:
    pytest.importorskip("trl")
    app = typer.Typer()
    app.command()(demo)
    result = CliRunner().invoke(app, ["--model", "tiny", "--steps", "2", "--output", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "success rate" in result.output
    png = (tmp_path / "reward_curve.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    record = json.loads((tmp_path / "demo.json").read_text())
    assert record["before"]["episodes"] == record["after"]["episodes"] == 32
    assert len(record["train_reward_per_step"]) == 2
