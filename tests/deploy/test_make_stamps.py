"""`make serve` and `make demo` install only when pyproject.toml or the lock changed (issue 24: `make serve`
re-ran pip on every start). The real Makefile runs under GNU make in a copy of the project files, with a
PYTHON whose `pip` only logs its arguments and a `gym-server` on PATH that only logs its own."""

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
    for name in ("Makefile", "pyproject.toml", "requirements/lock.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tmp_path / name)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python"
    python.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = -m ] && [ "$2" = pip ]; then echo "pip $*" >> "$LOG"; exit "${PIP_RC:-0}"; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    gym = bin_dir / "gym-server"
    gym.write_text('#!/bin/sh\necho "gym-server $*" >> "$LOG"\n')
    for script in (python, gym):
        script.chmod(0o755)
    return tmp_path


def make(project: Path, target: str, pip_rc: int = 0) -> tuple[int, list[str]]:
    """Run `make TARGET` and return its status and the commands the fakes saw (then clear the log)."""
    log = project / "calls.log"
    env = {
        **os.environ,
        "PATH": f"{project / 'bin'}:{os.environ['PATH']}",
        "LOG": str(log),
        "PIP_RC": str(pip_rc),
    }
    done = subprocess.run(
        ["make", "--no-print-directory", target, f"PYTHON={project / 'bin' / 'python'}"],
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
