"""An offline host installs `gym-server[trl]` from a wheelhouse and runs the demo there (issue 25 item 3).

`deploy/wheelhouse.sh --extras trl --with-project` fills a folder for this machine's interpreter and glibc
(the GPU recipe in docs/gpu.md only changes `--python`/`--platform`); a fresh venv, with no system
site-packages and no pip configuration (so neither the index nor the machine's find-links can help),
installs from it with `--no-index`, and its own `gym-server`:

* lists `--device` and `--dtype` in `demo --help`;
* refuses `demo --device cuda` on a host without CUDA in one line, exit 2 (on a GPU host that half of
  the sequence is the real run, which this test cannot make);
* runs the CPU demo path for one GRPO step: its own gym server, the tiny model's warm-up, the held-out
  evaluation before and after, the step and the saved model. One step because the install, not the
  learning, is under test here (`tests/trainer_adapters/test_demo.py` checks the demo's results).

Cost: the wheelhouse is stamped and cached (`$GYM_CI_CACHE`), so only the first run downloads; the rest
is one venv install of ~80 wheels (torch included) and a one-step tiny demo.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]


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
    installed = _run([*install, str(wheelhouse), "gym-server[trl]"], tmp_path, PIP_CONFIG_FILE=os.devnull)
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

    output = tmp_path / "demo"
    demo = [gym, "demo", "--model", "tiny", "--steps", "1", "--device", "cpu", "--tracker", "none"]
    ran = _run([*demo, "--output", str(output)], tmp_path, timeout=1200)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    record = json.loads((output / "demo.json").read_text())
    assert record["device"] == "cpu fp32" and record["steps"] == 1
    assert record["before"]["episodes"] == record["after"]["episodes"] == 32
    assert len(record["train_reward_per_step"]) == 1 and (output / "model" / "config.json").is_file()
