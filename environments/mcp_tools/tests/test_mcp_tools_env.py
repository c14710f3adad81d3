"""The `mcp_tools` kind without a server: the example's golden verifier fixtures (full, zero, malformed,
hedged, determinism), manifests and inline tasks refused naming the field, the generated dataset
reproducible, and the family registered. The episodes with the real server are in
tests/e2e/test_mcp_tools_env.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gym_env_mcp_tools.env import MANIFESTS, McpToolsEnv, environments, mcp_environment
from gym_env_mcp_tools.manifest import load_manifest
from gym_env_mcp_tools.time import generate
from gym_server.core.errors import InvalidRequest
from gym_server.sdk.registry import Registry
from gym_server.sdk.tasks import DATASETS_ROOT

HERE = Path(__file__).resolve().parent.parent / "gym_env_mcp_tools"
TIME = mcp_environment(HERE / "time" / "manifest.json")
GOLDEN = [
    json.loads(line)
    for line in (HERE / "time" / "fixtures" / "golden.jsonl").read_text(encoding="utf-8").splitlines()
    if line.strip()
]


async def _verify(case: dict[str, Any]) -> Any:
    """Replay a fixture's assistant turns the way a session does (tool calls through the engine, so
    `submit_answer` is the real tool), then score; no server is started, since scoring needs none."""
    task = TIME.dataset().get(case["task_id"])
    assert task is not None
    env = TIME(task, case["seed"])
    env.messages = [{"role": "user", "content": str(task.prompt)}]
    for message in case["messages"]:
        env.messages.append(message)
        if message.get("tool_calls"):
            env.messages += await env.run_tool_calls(
                message["tool_calls"], tool_timeout_s=5, max_tool_calls=4
            )
    return await env.verify()


def test_the_fixtures_cover_every_required_kind() -> None:
    assert {"full", "zero", "malformed", "hedged"} <= {case["kind"] for case in GOLDEN}


@pytest.mark.parametrize("case", GOLDEN, ids=[case["name"] for case in GOLDEN])
async def test_golden_fixtures_and_determinism(case: dict[str, Any]) -> None:
    first, second = await _verify(case), await _verify(case)
    assert first.reward == pytest.approx(case["expected_reward"])
    assert first.failure == case["expected_failure"]
    for name, value in case["expected_components"].items():
        assert first.components[name] == pytest.approx(value), name
    assert first.model_dump() == second.model_dump()


def test_the_family_offers_one_environment_per_manifest() -> None:
    classes = environments()
    assert (
        [cls.name for cls in classes]
        == ["mcp_tools/time"]
        == [f"mcp_tools/{p.parent.name}" for p in MANIFESTS]
    )
    assert classes[0] is TIME and issubclass(TIME, McpToolsEnv)
    registry = Registry.discover()
    assert "mcp_tools/time" in registry
    entry = registry.get("mcp_tools/time")
    assert entry.cls.max_turns == 8 and entry.cls.dataset().tasks("train")
    # The server's tools are listed per episode; before one, the catalog shows the gym's own.
    assert [tool["function"]["name"] for tool in TIME.catalog_tools()] == ["submit_answer"]


def test_a_broken_manifest_is_refused_naming_the_field(tmp_path: Path) -> None:
    manifest = json.loads((HERE / "time" / "manifest.json").read_text())
    for change, field in (
        ({"server": {**manifest["server"], "command": []}}, "server.stdio.command"),
        ({"server": {**manifest["server"], "shell": "sh"}}, "server.stdio.shell"),
        ({"server": {"transport": "streamable-http", "url": "file:///etc"}}, "server.streamable-http.url"),
        ({"server": {"command": ["python3"]}}, "discriminator 'transport'"),
        ({"name": "Has Spaces"}, "name"),
        ({"verifier": {"kind": "vibes"}}, "verifier.kind"),
    ):
        path = tmp_path / "manifest.json"
        path.write_text(json.dumps({**manifest, **change}))
        with pytest.raises(ValueError, match=field.replace(".", r"\.")):
            load_manifest(path)


@pytest.mark.parametrize(
    ("answer", "metadata", "needle"),
    [
        (5, {}, "task.answer"),
        ([], {}, "accepted answers is empty"),
        ("16:10", {"files": {"a.txt": 3}}, "task.metadata.files"),
    ],
)
def test_inline_tasks_are_checked(answer: Any, metadata: dict[str, Any], needle: str) -> None:
    with pytest.raises(InvalidRequest, match=needle):
        TIME.inline_task({"id": "t", "prompt": "What time?", "answer": answer, "metadata": metadata})
    assert TIME.inline_task({"id": "t", "prompt": "What time?", "answer": ["16:10", "4:10"]}).answer


def test_the_dataset_is_what_the_generator_makes(tmp_path: Path) -> None:
    generate.write(tmp_path)
    for split in ("train", "validation"):
        committed = DATASETS_ROOT / "mcp_time" / f"{split}.jsonl"
        assert (tmp_path / f"{split}.jsonl").read_text() == committed.read_text(), split
    kinds = {
        json.loads(line)["metadata"]["kind"] for line in (tmp_path / "train.jsonl").read_text().splitlines()
    }
    assert kinds == {"convert", "arrival"}


def test_zones_with_daylight_saving_time_are_refused() -> None:
    with pytest.raises(ValueError, match="daylight saving"):
        generate.offset_minutes("Europe/Paris")
    assert generate.offset_minutes("Asia/Kathmandu") == 5 * 60 + 45
