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
import venv
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gym_server.cli.main import app
from gym_server.cli.scaffold import gym_install_command

ROOT = Path(__file__).resolve().parents[2]
PURELIB = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
SETUPTOOLS_70_1 = (
    "import setuptools, sys; sys.exit(tuple(map(int, setuptools.__version__.split('.')[:2])) < (70, 1))"
)
# A `.pth` line run as the venv starts: `wheel` is found only where setuptools vendors its own copy, as
# on a machine without the package (the system site-packages of this one may hold it).
HIDE_WHEEL = (
    "import sys; sys.meta_path.insert(0, type('NoWheel', (), {'find_spec': staticmethod("
    "lambda name, path=None, target=None: None if name != 'wheel' else "
    "__import__('importlib.machinery').machinery.PathFinder.find_spec("
    "name, [p for p in __import__('sys').path if p.endswith('_vendor')]) "
    "or (_ for _ in ()).throw(ModuleNotFoundError(name)))})())\n"
)


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

    # No ensurepip packages in the venv: Python 3.11's bundled setuptools 65.5 would shadow the system's
    # and cannot build a wheel without the `wheel` package, which a new machine lacks ("invalid command
    # 'bdist_wheel'", issue 37). pip and setuptools (>= 70.1, bdist_wheel built in: the dev extra's) come
    # from the system site-packages, and `wheel` is hidden, so this runs as on a new machine.
    venv.EnvBuilder(with_pip=False, system_site_packages=True).create(tmp_path / "venv")
    python = str(tmp_path / "venv" / "bin" / "python")
    purelib = Path(run([python, "-c", PURELIB], tmp_path).stdout.strip())
    (purelib / "no_system_wheel.pth").write_text(HIDE_WHEEL)
    run([python, "-c", SETUPTOOLS_70_1], tmp_path)

    dist = tmp_path / "dist"
    build = [python, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
    run([*build, "--wheel-dir", str(dist), str(ROOT)], cwd=tmp_path)
    (wheel,) = dist.glob("gym_server-*.whl")

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
