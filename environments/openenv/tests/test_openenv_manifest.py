"""The OpenEnv manifest: what it registers, and what it refuses. Playing one against a real OpenEnv
server is tests/interop/openenv/test_openenv_inside_gym.py (`make interop PEER=openenv`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gym_env_openenv.env import (
    MANIFEST_VARIABLE,
    ManifestEntry,
    OpenEnvEnvironment,
    environments,
    make_environment,
)
from gym_server.core.errors import BackendUnavailable, EnvironmentDefinitionError
from gym_server.protocols.openenv.remote import ws_url
from gym_server.sdk.registry import Registry


def test_without_a_manifest_nothing_is_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MANIFEST_VARIABLE, raising=False)
    assert environments() == []


def test_each_manifest_entry_is_an_environment_with_its_dataset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "train.jsonl").write_text(
        '{"id": "t-0", "prompt": "go", "metadata": {"reset": {}}}\n'
    )
    manifest = tmp_path / "m.toml"
    manifest.write_text(
        f'[[environment]]\nname = "guess"\nurl = "http://127.0.0.1:9"\ndataset = "{tmp_path / "tasks"}"\n'
        "max_turns = 5\ntimeout_s = 2\n"
    )
    monkeypatch.setenv(MANIFEST_VARIABLE, str(manifest))
    (cls,) = environments()
    assert issubclass(cls, OpenEnvEnvironment)
    assert (cls.name, cls.url, cls.max_turns, cls.timeout_s) == (
        "openenv/guess",
        "http://127.0.0.1:9",
        5,
        2.0,
    )
    registry = Registry([cls])
    entry = registry.get("openenv/guess")
    assert [task.id for task in entry.dataset.tasks()] == ["t-0"]
    assert [tool["function"]["name"] for tool in cls.catalog_tools()] == ["act"]


@pytest.mark.parametrize(
    "text",
    [
        '[[environment]]\nname = "Bad Name"\nurl = "http://x"\ndataset = "/tmp"\n',
        '[[environment]]\nname = "x"\nurl = "file:///etc/passwd"\ndataset = "/tmp"\n',
        '[[environment]]\nname = "x"\nurl = "http://x"\ndataset = "/tmp"\ncolour = "red"\n',
        "[[environment]\n",
    ],
)
def test_a_bad_manifest_is_refused_at_registration(
    text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = tmp_path / "m.toml"
    manifest.write_text(text)
    monkeypatch.setenv(MANIFEST_VARIABLE, str(manifest))
    with pytest.raises(EnvironmentDefinitionError, match="OpenEnv manifest"):
        environments()


async def test_a_server_that_is_not_there_is_a_503_at_creation(tmp_path: Path) -> None:
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "train.jsonl").write_text('{"id": "t-0", "prompt": "go"}\n')
    cls = make_environment(
        ManifestEntry(name="gone", url="http://127.0.0.1:9", dataset=tmp_path / "tasks", timeout_s=2)
    )
    env = cls(cls.dataset().tasks()[0], 0)
    with pytest.raises(BackendUnavailable, match="unreachable"):
        await env.reset()


def test_ws_url_is_openenv_clients() -> None:
    assert ws_url("http://h:1/") == "ws://h:1/ws"
    assert ws_url("https://h/x") == "wss://h/x/ws"
    assert ws_url("ws://h") == "ws://h/ws"
