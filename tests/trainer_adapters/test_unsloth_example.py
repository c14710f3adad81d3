"""`examples/train_grpo_unsloth.py` on a machine without Unsloth or a GPU: it parses, reads its
environment, and stops with a message that says what is missing. The recipe itself needs an NVIDIA GPU
and is unproven here (docs/unsloth.md)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
from gymtest import ROOT

SCRIPT = ROOT / "examples" / "train_grpo_unsloth.py"


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_unsloth_example_parses_and_reads_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("train_grpo_unsloth", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # imports nothing heavy at module level
    env = {"GYM_URL": "http://gym:8000", "GYM_ENV": "tool_call", "TRAIN_STEPS": "7", "TRAIN_RUN": "u"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = module.parse_args([])
    assert (args.gym_url, args.env, args.steps, args.run) == ("http://gym:8000", "tool_call", 7, "u")
    assert set(module.ENVIRONMENT.values()) <= set(vars(args))
    assert run("--help").returncode == 0


@pytest.mark.skipif(importlib.util.find_spec("unsloth") is not None, reason="Unsloth is installed here")
def test_without_unsloth_the_example_says_what_is_missing() -> None:
    done = run("--gym-url", "http://127.0.0.1:9")
    assert done.returncode == 1
    assert "Unsloth is not installed: pip install unsloth" in done.stderr
    assert "Traceback" not in done.stderr
