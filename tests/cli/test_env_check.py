"""`gym-server env check`: every built-in environment passes it, and each check catches the fault it is
for in an environment broken on purpose."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gymtest import ROOT, console_script

from gym_server import Environment, HackProbe, VerifyResult, tool
from gym_server.core.settings import get_settings
from gym_server.envcheck import check_environment
from gym_server.sdk.registry import Registry

REGISTRY = Registry.discover()
# The families are many generated classes of one code: the reasoning-gym audit covers each generator,
# three of them stand for the family here. An MCP environment needs its server installed for the
# sandboxes (`make mcp-tools`, GYM_SANDBOX__TOOLS_DIR); NeMo Gym and OpenEnv ones need peers' servers.
FAMILY_SAMPLE = ["reasoning_gym/leg_counting", "reasoning_gym/gcd", "reasoning_gym/sudoku"]
NEEDS_TOOLS = "mcp_tools/"
BUILT_INS = [
    name
    for name in REGISTRY.names()
    if not name.startswith(("reasoning_gym/", "nemo_gym/", "openenv/"))
    and (not name.startswith(NEEDS_TOOLS) or os.environ.get("GYM_SANDBOX__TOOLS_DIR"))
] + [name for name in FAMILY_SAMPLE if name in REGISTRY]


@pytest.fixture
def fast_sandboxes(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Sandboxed environments on bubblewrap where it runs (the repo_repair and terminal checks take
    seconds there, a minute on Docker); their own tests replay them on both backends."""
    if shutil.which("bwrap") and not os.environ.get("GYM_SANDBOX__BACKEND"):
        monkeypatch.setenv("GYM_SANDBOX__BACKEND", "bubblewrap")
    get_settings.cache_clear()
    yield
    monkeypatch.undo()
    get_settings.cache_clear()


@pytest.mark.usefixtures("fast_sandboxes")
@pytest.mark.parametrize("name", BUILT_INS)
def test_every_built_in_environment_passes(name: str) -> None:
    report = check_environment(REGISTRY.get(name), REGISTRY, tasks=2)
    failed = [f"{check.name}: {check.detail}" for check in report.checks if check.status == "fail"]
    assert report.ok, failed
    assert report.get("determinism").status == "pass"
    assert report.get("throughput").data["episodes"] > 0
    if report.get("reference").status != "skip":
        assert report.get("reference").status == "pass"


def test_the_built_ins_declare_references_and_sandbox_probes() -> None:
    for name in ("counter", "math", "python_repl", "humaneval", "reasoning_gym/gcd"):
        cls = REGISTRY.get(name).cls
        assert cls.reference_solution is not Environment.reference_solution, name
    for name in ("python_repl", "humaneval"):
        assert REGISTRY.get(name).cls.hack_probes is not Environment.hack_probes, name


class Broken(Environment):
    """Pays an empty answer, opens differently on every reset, and its reference is wrong."""

    name = "broken"
    multi_turn = True
    opened = 0

    async def setup(self) -> None:
        type(self).opened += 1  # state outside the task and seed: the opening differs every time

    def opening_messages(self) -> list[dict[str, Any]]:
        return [{"role": "user", "content": f"{self.task.prompt} (episode {self.opened})"}]

    @tool
    async def peek(self) -> str:
        """Leak the answer."""
        return str(self.task.answer)

    async def verify(self) -> VerifyResult:
        said = self.final_answer().strip()
        return VerifyResult(reward=1.0 if said in ("", str(self.task.answer)) else 0.0)

    def reference_solution(self) -> list[dict[str, Any]]:
        return [{"role": "assistant", "content": "not it"}]

    def hack_probes(self) -> list[HackProbe]:
        return [HackProbe(name="say-it", messages=[{"role": "assistant", "content": str(self.task.answer)}])]


def test_a_broken_environment_fails_the_checks_for_its_faults(tmp_path: Path) -> None:
    folder = tmp_path / "broken"
    folder.mkdir()
    lines = [json.dumps({"id": f"broken-{i}", "prompt": f"Say {i}.", "answer": str(i)}) for i in range(3)]
    (folder / "validation.jsonl").write_text("\n".join(lines) + "\n")
    cls = type("BrokenHere", (Broken,), {"dataset_dir": folder})
    registry = Registry([cls])
    report = check_environment(registry.get("broken"), registry, tasks=3)
    statuses = {check.name: check.status for check in report.checks}
    assert not report.ok
    assert statuses["determinism"] == "fail"
    assert statuses["reference"] == "fail"
    assert statuses["probe:empty"] == "fail"
    assert statuses["probe:own"] == "fail"  # saying the answer scores 1 > max_reward 0
    assert statuses["probe:tool-spam"] == "fail"  # ends with an empty answer, which this verifier pays
    assert statuses["fixtures"] == "skip" and statuses["sandbox"] == "skip"


def test_the_cli_prints_json_and_exits_by_the_verdict() -> None:
    done = console_script("env", "check", "counter", "--json", "--tasks", "2", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["env"] == "counter" and report["kind"] == "multi-turn"
    assert report["tools"] == ["read", "add", "submit"]
    assert {check["name"] for check in report["checks"]} >= {
        "determinism",
        "reference",
        "spread",
        "throughput",
    }
    table = console_script("env", "check", "counter", "--tasks", "2", cwd=ROOT)
    assert table.returncode == 0 and "counter" in table.stdout and "passed" in table.stdout
    unknown = console_script("env", "check", "no_such_env", cwd=ROOT)
    assert unknown.returncode == 2 and "no_such_env" in unknown.stderr
