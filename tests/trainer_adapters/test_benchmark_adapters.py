"""`benchmarks/adapters.py --quick` runs: a gym server, the cold tiny model, every adapter row of this
venv against its direct generate loop, and the table with the machine it ran on. No timing is asserted
(the numbers are the benchmark's, recorded in docs/benchmarks.md)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from gymtest import ROOT

pytestmark = pytest.mark.slow


def test_the_adapter_benchmark_smoke_run_prints_its_table() -> None:
    pytest.importorskip("trl")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRL_EXPERIMENTAL_SILENCE": "1", "PYTHONWARNINGS": "ignore"}
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "adapters.py"), "--quick"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    table = result.stdout
    assert "| driver (RolloutDriver + GymClient) | 2 |" in table
    assert "| trl (GymRolloutFunc) | 2 |" in table
    assert "machine: " in table and "load average at start" in table and "transformers 5." in table
