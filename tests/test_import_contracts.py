"""The import contracts (pyproject.toml, docs/architecture.md) hold, and they catch a forbidden import.

`make lint` runs `lint-imports` too; this proves the walls are real: an environment that reaches into the
store, or a client module that imports the server, breaks the check with the offending line named.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT = "from importlinter.cli import lint_imports_command; lint_imports_command()"


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` over the workspace found at `root` (each distribution's folder first on the path), with
    `root`'s pyproject.toml."""
    folders = [root, root / "trainer_adapters", root / "verifiers", root / "datasets"]
    folders += sorted(path.parent for path in root.glob("environments/*/pyproject.toml"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, folders)), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-c", LINT, "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    for folder in ("gym_server", "trainer_adapters", "verifiers", "datasets", "environments"):
        ignored = shutil.ignore_patterns("__pycache__", "*.egg-info", "tests", "*.jsonl")
        shutil.copytree(REPO / folder, tmp_path / folder, ignore=ignored)
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    return tmp_path


def test_the_tree_keeps_every_contract() -> None:
    done = lint_imports(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(
    ("module", "line", "named"),
    [
        (
            "environments/counter/gym_env_counter/env.py",
            "from gym_server.store.records import FailureClass",
            "gym_env_counter.env -> gym_server.store.records",
        ),
        (
            "trainer_adapters/gym_trainer/episodes.py",
            "from gym_server.core import settings",
            "gym_trainer.episodes -> gym_server.core.settings",
        ),
        ("gym_server/auth/middleware.py", "from gym_server.api import deps", ".auth -> .api"),
        (
            "gym_server/sessions/manager.py",
            "from gym_env_counter import env",
            "gym_server.sessions.manager -> gym_env_counter.env",
        ),
    ],
    ids=["env-reaches-the-store", "client-imports-the-server", "auth-api-cycle", "service-imports-an-env"],
)
def test_a_forbidden_import_breaks_a_contract(copy: Path, module: str, line: str, named: str) -> None:
    path = copy / module
    path.write_text(path.read_text() + f"\n{line}  # forbidden\n")
    done = lint_imports(copy)
    assert done.returncode == 1, done.stdout
    assert named in done.stdout.replace("\n", " ")
