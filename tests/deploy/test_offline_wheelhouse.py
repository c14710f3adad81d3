"""An offline host installs `gym-server[trl,environments]` from a wheelhouse and runs the demo there.

`deploy/wheelhouse.sh --extras trl --with-project` fills a folder for this machine's interpreter and glibc
(the GPU recipe in docs/gpu.md only changes `--python`/`--platform`); a fresh venv, with no system
site-packages and no pip configuration (so neither the index nor the machine's find-links can help),
installs from it with `--no-index`, and its own `gym-server`:

* lists `--device` and `--dtype` in `demo --help`;
* refuses `demo --device cuda` on a host without CUDA in one line, exit 2 (on a GPU host that half of
  the sequence is the real run, which this test cannot make);
* runs the demo's CPU training path for one GRPO step (`ONE_STEP`): the same calls `gym-server demo`
  makes (its gym server as a subprocess, `--device cpu` through the resolver, the tiny policy, the
  demo's `GRPOConfig`, TRL's trainer with the gym's `rollout_func` sampling in process), with two
  episodes of 16 tokens. The full demo adds the tiny model's warm-up and 64 held-out episodes: model
  work that took over 15 minutes on this shared CI machine, and tests nothing the install could break
  that this does not (`tests/trainer_adapters/test_demo.py` runs the whole demo).

Cost: the wheelhouse is stamped and cached (`$GYM_CI_CACHE`), so only the first run downloads; the rest
is one venv install of ~90 wheels (torch included) and one short GRPO step.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Run by the venv's python: one GRPO step of the demo's recipe on the CPU, the gym started as the demo does.
ONE_STEP = """
import sys
from pathlib import Path

import trl

from gym_server.cli.local_gym import local_gym
from gym_trainer.trl import grpo_args
from gym_trainer.devices import resolve
from gym_trainer.models import load_policy
from gym_trainer.trl import GymRolloutFunc, gym_reward, load_gym_dataset

out = Path(sys.argv[1])
placement = resolve("cpu", "auto")
with local_gym(None, out / "gym.db") as url:
    model, tokenizer = load_policy("tiny", placement=placement)
    dataset = load_gym_dataset(url, "counter", split="train", limit=4, seed=0)
    rollout = GymRolloutFunc(url, max_turns=2, run="offline", seed=0)
    args = grpo_args(out / "model", placement, reward_weights=[1.0], generations=2, prompts_per_step=1,
                     max_completion=16, lr=1e-3, steps=1, seed=0)
    trainer = trl.GRPOTrainer(model=model, reward_funcs=[gym_reward], args=args, train_dataset=dataset,
                              processing_class=tokenizer, rollout_func=rollout)
    trainer.train()
    rollout.close()
print(placement.describe(), trainer.state.global_step, rollout.history[0]["episodes"])
"""
pytestmark = [pytest.mark.slow, pytest.mark.heavy, pytest.mark.timeout(1500)]


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without its import paths or pip settings: only the venv decides."""
    drop = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("PIP_")}
    return env | extra


def _run(command: list[str], cwd: Path, timeout: int = 900, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        cwd=cwd,
        env=_clean_env(**extra),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _wheelhouse() -> Path:
    libc, version = platform.libc_ver()
    if libc != "glibc":
        pytest.skip("the wheelhouse targets glibc Linux")
    cache = Path(os.environ.get("GYM_CI_CACHE") or Path.home() / ".cache" / "gym-server")
    folder = cache / "offline-wheelhouse-trl"
    tag = f"manylinux_{version.replace('.', '_')}_{platform.machine()}"
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    target = ["--python", python, "--platform", tag, "--extras", "trl", "--out", str(folder)]
    done = subprocess.run(
        ["bash", "deploy/wheelhouse.sh", *target, "--with-project"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    if done.returncode != 0 and "pip download failed" in done.stdout + done.stderr:
        pytest.skip(f"no package index reachable to fill the wheelhouse: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stdout + done.stderr
    return folder


def test_the_demo_runs_from_a_wheelhouse_in_a_fresh_venv_with_no_index(tmp_path: Path) -> None:
    wheelhouse = _wheelhouse()
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(tmp_path / "venv")
    bin_dir = tmp_path / "venv" / "bin"
    install = [str(bin_dir / "python"), "-m", "pip", "install", "-q", "--no-index", "--find-links"]
    installed = _run(
        [*install, str(wheelhouse), "gym-server[trl,environments]"], tmp_path, PIP_CONFIG_FILE=os.devnull
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    gym = str(bin_dir / "gym-server")

    where = _run(
        [str(bin_dir / "python"), "-c", "import gym_server, torch; print(gym_server.__file__)"], tmp_path
    )
    assert where.stdout.strip().startswith(str(tmp_path / "venv")), where.stdout + where.stderr

    helped = _run([gym, "demo", "--help"], tmp_path, COLUMNS="200")
    assert helped.returncode == 0 and "--device" in helped.stdout and "--dtype" in helped.stdout

    probe = _run([str(bin_dir / "python"), "-c", "import torch; print(torch.cuda.is_available())"], tmp_path)
    if probe.stdout.strip() == "False":
        refused = _run(
            [gym, "demo", "--device", "cuda", "--tracker", "none", "--output", str(tmp_path / "x")], tmp_path
        )
        assert refused.returncode == 2, refused.stdout + refused.stderr
        (line,) = refused.stderr.strip().splitlines()
        assert line.startswith("error: --device cuda needs CUDA")

    stepped = _run([str(bin_dir / "python"), "-c", ONE_STEP, str(tmp_path)], tmp_path, HF_HUB_OFFLINE="1")
    assert stepped.returncode == 0, stepped.stdout[-2000:] + stepped.stderr[-2000:]
    assert stepped.stdout.strip().splitlines()[-1] == "cpu fp32 1 2"
    assert (tmp_path / "gym.db").is_file()  # the venv's own gym server stored the step's episodes
