"""The environment base class and the registry: definitions checked at registration, entry-point
discovery of third-party environments, and versions that change exactly when code or data change."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gym_server import Environment, Registry, Task, VerifyResult
from gym_server.core.errors import EnvironmentDefinitionError, EnvironmentNotFound, TaskNotFound
from gym_server.sdk.registry import content_hash
from gym_server.sdk.tasks import Dataset


class Plain(Environment):
    name = "plain"

    async def verify(self) -> VerifyResult:
        return VerifyResult(reward=float(self.final_answer() == "yes"))


async def test_single_turn_default_ends_on_a_plain_answer() -> None:
    env = Plain(Task(id="t", prompt="say yes"), seed=1)
    assert await env.reset() == [{"role": "user", "content": "say yes"}]
    outcome = await env.step({"role": "assistant", "content": "yes"})
    assert outcome.done and env.done_reason == "answered"
    assert (await env.verify()).reward == 1.0
    with pytest.raises(RuntimeError):
        await env.step({"role": "assistant", "content": "again"})


async def test_tool_calls_without_ids_get_stable_ones() -> None:
    env = Plain(Task(id="t", prompt="p"))
    await env.reset()
    outcome = await env.step(
        {"role": "assistant", "tool_calls": [{"function": {"name": "x", "arguments": "{}"}}]}
    )
    assert outcome.messages[0]["tool_call_id"] == "call_1_0"
    assert "available tools: none" in outcome.messages[0]["content"]


@pytest.mark.parametrize(
    ("attrs", "needle"),
    [
        ({"name": ""}, "has no `name`"),
        ({"name": "Bad Name"}, "must be lowercase"),
        ({"name": "ok", "max_turns": 0}, "max_turns must be at least 1"),
    ],
)
def test_registry_rejects_broken_definitions(attrs: dict[str, object], needle: str) -> None:
    broken = type("Broken", (Plain,), attrs)
    with pytest.raises(EnvironmentDefinitionError, match=needle):
        Registry([broken])


def test_registry_rejects_missing_verify_and_duplicates() -> None:
    no_verify = type("NoVerify", (Environment,), {"name": "nv"})
    with pytest.raises(EnvironmentDefinitionError, match="does not implement verify"):
        Registry([no_verify])
    twin = type("Twin", (Plain,), {})
    with pytest.raises(EnvironmentDefinitionError, match="two environments are named 'plain'"):
        Registry([Plain, twin])


def test_unknown_names_list_what_exists() -> None:
    registry = Registry([Plain])
    with pytest.raises(EnvironmentNotFound, match="known environments: plain"):
        registry.get("other")
    with pytest.raises(TaskNotFound):
        registry.get("plain").task("nope")


def test_third_party_environment_is_discovered_through_its_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "thirdparty_env"
    package.mkdir()
    (package / "__init__.py").write_text(
        textwrap.dedent("""
        from gym_server import Environment, VerifyResult

        class Third(Environment):
            name = "third"
            description = "from another distribution"

            async def verify(self) -> VerifyResult:
                return VerifyResult(reward=0.0)

        def broken():
            raise ImportError("this family is broken")
    """)
    )
    dist = tmp_path / "thirdparty_env-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: thirdparty-env\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[gym_server.environments]\nthird = thirdparty_env:Third\nbroken = thirdparty_env:broken\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = Registry.discover()
    assert "third" in registry and "counter" in registry
    assert "broken" not in registry
    assert registry.get("third").cls.description == "from another distribution"


def test_content_hash_tracks_content_not_mtime(tmp_path: Path) -> None:
    (tmp_path / "env.py").write_text("A = 1\n")
    (tmp_path / "data.jsonl").write_text('{"id": "1", "prompt": "p"}\n')
    first = content_hash([tmp_path])
    (tmp_path / "env.py").touch()
    assert content_hash([tmp_path]) == first
    (tmp_path / "data.jsonl").write_text('{"id": "1", "prompt": "q"}\n')
    assert content_hash([tmp_path]) != first


def test_dataset_errors_name_the_file_and_line(tmp_path: Path) -> None:
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "train.jsonl").write_text('{"id": "a", "prompt": "p"}\n{"id": "a", "prompt": "q"}\n')
    with pytest.raises(EnvironmentDefinitionError, match=r"train.jsonl:2: duplicate task id 'a'"):
        Dataset("broken", root=tmp_path).tasks()
    (folder / "train.jsonl").write_text('{"id": "a"}\n')
    with pytest.raises(EnvironmentDefinitionError, match=r"train.jsonl:1: not a valid task"):
        Dataset("broken", root=tmp_path).tasks()
