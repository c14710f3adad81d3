"""A scaffolded environment installs in a fresh venv, offline, with gym-server from a wheel built from this
tree (gym-server is not on the package index: issue 24), and passes `gym-server env check` there, its
reference solution included.

The venv sees the system site-packages for the gym's third-party dependencies (this machine has no
wheelhouse of them, and the test runs offline); gym-server itself and the new environment are installed
into the venv from the wheel and the project folder, and the test proves the venv runs those copies."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gym_server.cli.main import app
from gym_server.cli.scaffold import gym_install_command

ROOT = Path(__file__).resolve().parents[2]


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """A command with none of this suite's import paths: only the venv decides what it imports."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    return done


@pytest.mark.slow
def test_a_scaffolded_env_installs_offline_in_a_fresh_venv_and_passes_env_check(tmp_path: Path) -> None:
    scaffolded = CliRunner().invoke(app, ["init", "notes", "--dir", str(tmp_path)], terminal_width=300)
    assert scaffolded.exit_code == 0, scaffolded.output
    assert gym_install_command() in " ".join(scaffolded.output.split())
    assert gym_install_command() in (tmp_path / "notes" / "README.md").read_text()

    dist = tmp_path / "dist"
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
    run([*build, "--wheel-dir", str(dist), str(ROOT)], cwd=tmp_path)
    (wheel,) = dist.glob("gym_server-*.whl")

    venv.EnvBuilder(with_pip=True, system_site_packages=True).create(tmp_path / "venv")
    python = str(tmp_path / "venv" / "bin" / "python")
    pip = [python, "-m", "pip", "install", "-q", "--no-index", "--no-build-isolation"]
    # --force-reinstall: the system site-packages has a gym-server too; the venv must get the wheel's.
    run([*pip, "--no-deps", "--force-reinstall", str(wheel)], cwd=tmp_path)
    run([*pip, "--find-links", str(dist), "-e", str(tmp_path / "notes")], cwd=tmp_path)

    where = run([python, "-c", "import gym_server, gym_env_notes; print(gym_server.__file__)"], cwd=tmp_path)
    assert where.stdout.strip().startswith(str(tmp_path / "venv")), where.stdout

    checked = run(
        [str(tmp_path / "venv" / "bin" / "gym-server"), "env", "check", "notes", "--json"], tmp_path
    )
    report = json.loads(checked.stdout)
    statuses = {check["name"]: check["status"] for check in report["checks"]}
    assert "fail" not in statuses.values(), report["checks"]  # and the command exited 0
    assert statuses["reference"] == "pass", report["checks"]
