"""`make serve` and `make demo` install only when pyproject.toml or the lock changed (issue 24: `make serve`
re-ran pip on every start), into the project's own venv unless PYTHON names an interpreter (issue 37:
`make demo` installed into the machine's python3). The real Makefile runs under GNU make in a copy of the
project files, with a python whose `pip` and `-m gym_server` only log their arguments, and a base python
whose `-m venv` makes a venv holding that python."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    installs = ["Makefile", "pyproject.toml", "requirements/lock.txt", "requirements/workspace.txt"]
    members = [str(path.relative_to(ROOT)) for path in ROOT.glob("*/pyproject.toml")]
    members += [str(path.relative_to(ROOT)) for path in ROOT.glob("environments/*/pyproject.toml")]
    for name in installs + members:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tmp_path / name)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python"
    python.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = -m ] && [ "$2" = pip ]; then echo "pip $* (by $0)" >> "$LOG"; exit "${PIP_RC:-0}"; fi\n'
        'if [ "$1" = -m ] && [ "$2" = gym_server ]; then\n'
        '  shift 2; echo "gym-server $*" >> "$LOG"; exit 0\n'
        "fi\n"
        f'exec {sys.executable} "$@"\n'
    )
    base = bin_dir / "base-python"
    base.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = -m ] && [ "$2" = venv ]; then\n'
        f'  mkdir -p "$3/bin" && cp {python} "$3/bin/python" && touch "$3/pyvenv.cfg"\n'
        '  echo "venv $3" >> "$LOG"; exit 0\n'
        "fi\n"
        f'exec {sys.executable} "$@"\n'
    )
    for script in (python, base):
        script.chmod(0o755)
    return tmp_path


def make(project: Path, target: str, pip_rc: int = 0, *, venv: bool = False) -> tuple[int, list[str]]:
    """Run `make TARGET` and return its status and the commands the fakes saw (then clear the log): with
    PYTHON set to the fake python, or with `venv` the Makefile's own venv made by the fake base python."""
    log = project / "calls.log"
    env = {
        **os.environ,
        "PATH": f"{project / 'bin'}:{os.environ['PATH']}",
        "LOG": str(log),
        "PIP_RC": str(pip_rc),
        # A Makefile that fell back to the machine's python3 would install this copy into it: real pip
        # refuses to install outside a venv with this set.
        "PIP_REQUIRE_VIRTUALENV": "true",
    }
    env.pop("PYTHON", None)
    for inherited in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL"):  # an outer `make check PYTHON=...` passes its
        env.pop(inherited, None)  # command-line variables down through these, overriding the test's own
    interpreter = (
        f"BASE_PYTHON={project / 'bin' / 'base-python'}" if venv else f"PYTHON={project / 'bin' / 'python'}"
    )
    done = subprocess.run(
        ["make", "--no-print-directory", target, interpreter],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    calls = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return done.returncode, calls


def pip_runs(calls: list[str]) -> list[str]:
    return [call for call in calls if call.startswith("pip")]


def test_serve_installs_once_then_again_only_after_a_change(project: Path) -> None:
    status, calls = make(project, "serve")
    assert status == 0
    assert len(pip_runs(calls)) == 1
    assert calls[-1] == "gym-server serve"
    status, calls = make(project, "serve")
    assert status == 0
    assert calls == ["gym-server serve"]
    (project / "pyproject.toml").touch()
    _, calls = make(project, "serve")
    assert len(pip_runs(calls)) == 1
    _, calls = make(project, "serve")
    assert pip_runs(calls) == []
    # A changed lock counts too.
    lock = project / "requirements" / "lock.txt"
    lock.write_text(lock.read_text() + "\n")
    _, calls = make(project, "serve")
    assert len(pip_runs(calls)) == 1


def test_a_failed_install_is_retried_next_time(project: Path) -> None:
    status, calls = make(project, "serve", pip_rc=1)
    assert status != 0
    assert "gym-server serve" not in calls
    _, calls = make(project, "serve")
    assert len(pip_runs(calls)) == 1
    assert calls[-1] == "gym-server serve"


def test_demo_installs_the_trl_extra_once_and_runs_the_tiny_model(project: Path) -> None:
    _, calls = make(project, "demo")
    assert any("-e .[trl,tracking]" in call for call in pip_runs(calls))
    assert calls[-1] == "gym-server demo --model tiny"
    _, calls = make(project, "demo")
    assert calls == ["gym-server demo --model tiny"]
    # The trl install covers the base one: serve starts at once after it.
    _, calls = make(project, "serve")
    assert calls == ["gym-server serve"]


def test_without_python_the_targets_install_into_and_run_from_the_projects_own_venv(project: Path) -> None:
    venv_python = project / ".venv" / "bin" / "python"
    _, calls = make(project, "demo", venv=True)
    assert calls[0] == "venv .venv"  # made on first use, before any install
    installs = pip_runs(calls)
    assert installs and all(call.endswith(f"(by {venv_python})") for call in installs)
    assert calls[-1] == "gym-server demo --model tiny"
    _, calls = make(project, "demo", venv=True)
    assert calls == ["gym-server demo --model tiny"]  # the venv and its install are kept
    # A venv made anew has nothing installed: its old stamps do not count.
    shutil.rmtree(project / ".venv")
    _, calls = make(project, "serve", venv=True)
    assert calls[0] == "venv .venv" and len(pip_runs(calls)) == 1
    assert calls[-1] == "gym-server serve"
