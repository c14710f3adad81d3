"""The `gym-server` command line: catalog commands, `play` driven through stdin, and `init` whose
scaffolded project passes its own tests (entry-point discovery is tested in tests/sdk)."""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gym_env_counter.env import CounterEnv
from gym_server.cli.main import app

runner = CliRunner()


def test_envs_list_and_show() -> None:
    listed = runner.invoke(app, ["envs", "list"], terminal_width=200)
    assert listed.exit_code == 0, listed.output
    assert "counter" in listed.output and "multi-turn" in listed.output
    shown = runner.invoke(app, ["envs", "show", "counter"], terminal_width=200)
    assert shown.exit_code == 0
    assert '"name": "add"' in shown.output


def test_unknown_env_is_a_clear_error() -> None:
    result = runner.invoke(app, ["envs", "show", "nope"])
    assert result.exit_code == 2
    assert "no environment named 'nope'" in result.output


def test_tasks_hides_answers() -> None:
    result = runner.invoke(
        app, ["tasks", "counter", "--split", "validation", "--limit", "3"], terminal_width=200
    )
    assert result.exit_code == 0
    assert "counter-0050" in result.output and "counter-0053" not in result.output


def test_play_an_episode_through_stdin() -> None:
    task = CounterEnv.dataset().get("counter-0000")
    assert task is not None
    probe = CounterEnv(task, 0)
    asyncio.run(probe.reset())
    target, start = int(task.answer), probe.value
    lines = ["/tools", "/call read {}", "/call add {oops", "/frobnicate"]
    value = start
    while value != target:
        amount = max(-10, min(10, target - value))
        lines.append(f'/call add {{"amount": {amount}}}')
        value += amount
    lines.append("/call submit")
    result = runner.invoke(
        app,
        ["play", "counter", "--task", "counter-0000", "--seed", "0"],
        input="\n".join(lines) + "\n",
        terminal_width=200,
    )
    assert result.exit_code == 0, result.output
    assert "not valid JSON" in result.output
    assert "unknown command /frobnicate" in result.output
    assert "episode over: submitted" in result.output
    assert '{"reached":1.0,"submitted":1.0}' in result.output


def test_play_quits_cleanly_on_end_of_input() -> None:
    result = runner.invoke(app, ["play", "counter"], input="")
    assert result.exit_code == 0
    assert "episode over: quit" in result.output


def test_init_refuses_bad_names_and_non_empty_folders(tmp_path: Path) -> None:
    assert runner.invoke(app, ["init", "Bad-Name", "--dir", str(tmp_path)]).exit_code == 2
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("x")
    result = runner.invoke(app, ["init", "taken", "--dir", str(tmp_path)])
    assert result.exit_code == 2 and "not empty" in result.output


def declared_pytest_plugins(project: Path) -> list[str]:
    """The pytest plugins the project's `test` extra installs (their `pytest11` entry points)."""
    pyproject = tomllib.loads((project / "pyproject.toml").read_text())
    requirements = pyproject["project"].get("optional-dependencies", {}).get("test", [])
    names = [re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0] for requirement in requirements]
    return [
        point.value
        for name in names
        for point in importlib.metadata.distribution(name).entry_points
        if point.group == "pytest11"
    ]


@pytest.mark.slow
def test_init_scaffolds_a_project_whose_tests_pass(tmp_path: Path) -> None:
    """The scaffolded tests pass with only the pytest plugins its pyproject declares: plugin autoload is
    off, so a plugin installed here for gym-server's own suite (pytest-asyncio) does not hide a missing
    declaration, as on a fresh install of the project with `pip install -e '.[test]'`."""
    result = runner.invoke(app, ["init", "notes", "--dir", str(tmp_path)], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "pip install -e '.[test]'" in result.output
    project = tmp_path / "notes"
    for relative in (
        "pyproject.toml",
        "README.md",
        "gym_env_notes/env.py",
        "gym_env_notes/data/train.jsonl",
        "gym_env_notes/data/validation.jsonl",
        "gym_env_notes/fixtures/golden.jsonl",
        "tests/test_env.py",
    ):
        assert (project / relative).is_file(), relative
    plugins = [arg for plugin in declared_pytest_plugins(project) for arg in ("-p", plugin)]
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error", *plugins],
        cwd=project,
        env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "5 passed" in tests.stdout
