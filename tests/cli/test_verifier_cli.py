"""`gym-server verifiers check`: every verifier fixture and every environment's golden transcripts, in a
table, with a non-zero exit when any case fails."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from gymtest import console_script, golden_file
from typer.testing import CliRunner

from gym_env_counter.env import CounterEnv
from gym_server.cli import verifiers
from gym_server.cli.scaffold import scaffold
from gym_server.envcheck.golden import check_environments, check_verifiers
from gym_server.sdk.registry import Registry
from gym_verifiers.golden import FIXTURES_DIR

cli = typer.Typer()
cli.add_typer(verifiers.app, name="verifiers")
FAST_VERIFIERS = ("text", "rubric", "numeric", "choice", "format")


@pytest.fixture
def fixtures(tmp_path: Path) -> Path:
    """A copy of the quick verifier fixture files (the code suite needs a sandbox and takes minutes)."""
    folder = tmp_path / "fixtures"
    folder.mkdir()
    for name in FAST_VERIFIERS:
        shutil.copy(FIXTURES_DIR / f"{name}.jsonl", folder)
    return folder


@pytest.fixture
def envs(tmp_path: Path) -> Path:
    folder = tmp_path / "environments"
    for name in ("counter", "reasoning_gym"):
        (folder / name / "fixtures").mkdir(parents=True)
        shutil.copy(golden_file(name), folder / name / "fixtures")
    return folder


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Registry:
    classes: list[Any] = [CounterEnv]
    try:
        from gym_env_reasoning_gym.env import environments

        classes.extend(environments())
    except ImportError:  # pragma: no cover - reasoning-gym is optional (MissingExtra is an ImportError)
        pass
    chosen = Registry(classes)
    monkeypatch.setattr(verifiers, "load_registry", lambda: chosen)
    return chosen


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, ["verifiers", "check", *args], terminal_width=200)


def row(output: str, suite: str) -> list[str]:
    line = next(line for line in output.splitlines() if f"│ {suite} " in line)
    return [cell.strip() for cell in line.split("│") if cell.strip()]


def test_all_fixtures_pass_and_are_tabled(fixtures: Path, envs: Path, registry: Registry) -> None:
    result = invoke("--fixtures", str(fixtures), "--environments", str(envs))
    assert result.exit_code == 0, result.output
    rubric_cases = sum(1 for line in (fixtures / "rubric.jsonl").read_text().splitlines() if line.strip())
    counts = [str(rubric_cases), str(rubric_cases), "0", "0"]
    assert row(result.output, "rubric.jsonl") == ["rubric.jsonl", "verifier", *counts]
    assert row(result.output, "counter") == ["counter", "environment", "3", "3", "0", "0"]
    if "reasoning_gym/leg_counting" in registry:
        assert row(result.output, "reasoning_gym")[4:] == ["0", "0"]
    assert "FAIL" not in result.output
    assert "golden cases:" in result.output and " 0 failed" in result.output


def test_a_wrong_verifier_expectation_fails_the_command(
    fixtures: Path, envs: Path, registry: Registry
) -> None:
    with (fixtures / "text.jsonl").open("a") as file:
        case = {
            "name": "wrong_on_purpose",
            "kind": "full",
            "verifier": "text.exact_match",
            "args": {"response": "Paris", "reference": "Lyon"},
            "expect": {"score": 1.0},
        }
        file.write(json.dumps(case) + "\n")
    result = invoke("--fixtures", str(fixtures), "--environments", str(envs))
    assert result.exit_code == 1
    assert row(result.output, "text.jsonl")[4] == "1"
    assert (
        "FAIL text.jsonl:" in result.output and "wrong_on_purpose: score 0.0 != expected 1.0" in result.output
    )
    quiet = invoke("--fixtures", str(fixtures), "--environments", str(envs), "--quiet")
    assert quiet.exit_code == 1 and "FAIL" not in quiet.output


def test_a_wrong_environment_expectation_fails_the_command(
    fixtures: Path, envs: Path, registry: Registry
) -> None:
    path = envs / "counter" / "fixtures" / "golden.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[0]["reward"] = 0.5
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    result = invoke("--fixtures", str(fixtures), "--environments", str(envs), "--only", "counter")
    assert result.exit_code == 1
    assert row(result.output, "counter") == ["counter", "environment", "3", "2", "1", "0"]
    assert "counter/fixtures/golden.jsonl:1 full: reward 1 != expected 0.5" in result.output
    assert "rubric.jsonl" not in result.output  # --only filters the table


def test_environment_files_are_checked_for_shape(tmp_path: Path) -> None:
    folder = tmp_path / "environments" / "counter" / "fixtures"
    folder.mkdir(parents=True)
    counter = golden_file("counter").read_text().splitlines()
    unknown_env = {"name": "zero_elsewhere", "env": "nowhere", "task_id": "x", "reward": 0.0, "messages": []}
    unknown_task = {"name": "zero_task", "task_id": "counter-9999", "reward": 0.0, "messages": []}
    no_turns = {"name": "zero_turns", "task_id": "counter-0000", "reward": 0.0}
    lines = [counter[0], "{not json", json.dumps(unknown_env), json.dumps(unknown_task), json.dumps(no_turns)]
    (folder / "golden.jsonl").write_text("\n".join(lines) + "\n")
    (suite,) = check_environments(tmp_path / "environments", Registry([CounterEnv]))
    assert (suite.cases, suite.passed, suite.skipped, suite.failed) == (5, 1, 1, 3)
    problems = "\n".join(suite.problems)
    assert "golden.jsonl:2: not a golden case" in problems
    assert "cannot replay: environment 'counter' has no task 'counter-9999'" in problems
    assert "no `messages` (or `assistant`) list" in problems
    assert "no malformed case" in problems  # full and zero are there; malformed is not


def test_a_malformed_verifier_fixture_file_is_one_failed_suite(tmp_path: Path) -> None:
    (tmp_path / "broken.jsonl").write_text("not json\n")
    (suite,) = check_verifiers(tmp_path)
    assert not suite.ok and "broken.jsonl:1" in suite.problems[0]


SHIPPED = ("counter", "math", "tool_call", "workplace", "reasoning_gym")


def test_the_shipped_environment_fixtures_all_pass(tmp_path: Path, registry: Registry) -> None:
    for name in SHIPPED:  # these five; environments needing a sandbox are checked by their own suites
        (tmp_path / name / "fixtures").mkdir(parents=True)
        shutil.copy(golden_file(name), tmp_path / name / "fixtures")
    registry.add(Registry.discover().get("math").cls)
    for name in ("tool_call", "workplace"):
        registry.add(Registry.discover().get(name).cls)
    suites = check_environments(tmp_path, registry)
    assert [suite.name for suite in suites] == sorted(SHIPPED)
    assert all(suite.ok for suite in suites), [p for s in suites for p in s.problems]
    skipped = sum(suite.skipped for suite in suites)
    assert skipped == (0 if "reasoning_gym/leg_counting" in registry else 13)


@pytest.mark.slow
def test_an_installed_plugin_environment_is_checked(fixtures: Path, tmp_path: Path) -> None:
    """A scaffolded environment, pip-installed into a folder like any third-party distribution, is found
    through its entry point and its golden file beside its module is replayed (not skipped)."""
    scaffold("notes", tmp_path / "notes")
    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
    subprocess.run([*pip, "--target", str(site), str(tmp_path / "notes")], check=True, capture_output=True)
    result = console_script(
        "verifiers", "check", "--fixtures", str(fixtures), "--only", "notes", cwd=tmp_path, pythonpath=[site]
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert row(result.stdout, "notes") == ["notes", "environment", "3", "3", "0", "0"]
    assert "golden cases: 3 passed, 0 failed, 0 skipped" in result.stdout


def test_skipped_cases_fail_the_command_and_say_why(
    fixtures: Path, envs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A case whose environment is not installed is not a pass: exit 1, naming it and the extra."""
    from gym_env_reasoning_gym import env as rg_env

    monkeypatch.setattr(rg_env, "_installed", lambda: False)  # a base install, as discovery sees it
    monkeypatch.setattr(verifiers, "load_registry", Registry.discover)
    with (envs / "counter" / "fixtures" / "golden.jsonl").open("a") as file:
        absent = {
            "name": "zero_elsewhere",
            "env": "absent_env",
            "task_id": "x",
            "reward": 0.0,
            "messages": [],
        }
        file.write(json.dumps(absent) + "\n")
    result = invoke("--fixtures", str(fixtures), "--environments", str(envs))
    assert result.exit_code == 1, result.output
    assert row(result.output, "counter") == ["counter", "environment", "4", "3", "0", "1"]
    cases = len((envs / "reasoning_gym" / "fixtures" / "golden.jsonl").read_text().splitlines())
    assert row(result.output, "reasoning_gym")[2:] == [str(cases), "0", "0", str(cases)]
    output = " ".join(result.output.split())
    assert "SKIPPED absent_env: no such environment is installed" in output
    assert "SKIPPED reasoning_gym/leg_counting: the reasoning_gym/* family needs reasoning_gym" in output
    assert "pip install 'gym-server[reasoning-gym]'" in output
