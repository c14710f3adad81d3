"""A remote MCP server over streamable HTTP as a gym environment (manifest `transport: streamable-http`).

The remote server is a real MCP server built on the official SDK: a second `gym-server serve` whose
MCP facade serves the `counter` environment at `/v1/environments/counter/mcp`. The gym under test
registers `mcp_tools/remote-counter` from a manifest in a third-party package (an entry point, as a
user's own server would be registered, with its dataset beside the manifest), and each of its episodes
is one MCP session on the remote server: the remote tools are the episode's tools, a call is answered
by the remote episode and stored on both sides, the episode's close DELETEs the remote session, and a
remote server that goes away ends the episode with a failure class.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import ServerProcess
from gymtest import call, poll

pytestmark = pytest.mark.slow

ENV = "mcp_tools/remote-counter"
PACKAGE = """
from pathlib import Path

from gym_env_mcp_tools.env import mcp_environment


def environments():
    return [mcp_environment(Path(__file__).parent / "manifest.json")]
"""


def register(root: Path, url: str) -> None:
    """A third-party package whose entry point registers a manifest pointing at `url`."""
    package = root / "remote_counter_env"
    (package / "tasks").mkdir(parents=True)
    (package / "__init__.py").write_text(PACKAGE)
    manifest = {
        "name": "remote-counter",
        "description": "The counter environment of another gym, over MCP.",
        "server": {"transport": "streamable-http", "url": url, "call_timeout_s": 10},
        "dataset": "tasks",
        "max_turns": 6,
        "verifier": {"kind": "exact"},
    }
    (package / "manifest.json").write_text(json.dumps(manifest))
    task = {"id": "read-0", "prompt": "Read the counter and submit the value.", "answer": "20"}
    (package / "tasks" / "train.jsonl").write_text(json.dumps(task) + "\n")
    dist = root / "remote_counter_env-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: remote-counter-env\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[gym_server.environments]\nremote_counter = remote_counter_env:environments\n"
    )


@pytest.fixture
def gyms(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> Iterator[tuple[httpx.Client, httpx.Client, ServerProcess]]:
    remote = server_factory(f"sqlite:///{tmp_path / 'remote.db'}")
    remote.start()
    register(tmp_path / "site", f"{remote.url}/v1/environments/counter/mcp?task_id=counter-0000&seed=0")
    local = server_factory(f"sqlite:///{tmp_path / 'local.db'}", PYTHONPATH=str(tmp_path / "site"))
    local.start()
    with httpx.Client(base_url=local.url, timeout=60) as here, httpx.Client(base_url=remote.url) as there:
        yield here, there, remote
    local.stop()
    if remote.process is not None:
        remote.stop()


def open_episode(client: httpx.Client) -> dict[str, Any]:
    created = client.post("/v1/sessions", json={"env": ENV, "task_id": "read-0"})
    assert created.status_code == 201, created.text
    return dict(created.json())


def step(client: httpx.Client, session_id: str, message: dict[str, Any]) -> dict[str, Any]:
    response = client.post(f"/v1/sessions/{session_id}/step", json={"message": message})
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_a_remote_server_over_http_plays_an_episode(
    gyms: tuple[httpx.Client, httpx.Client, ServerProcess],
) -> None:
    here, there, _ = gyms
    created = open_episode(here)
    session_id = created["session_id"]
    assert {t["function"]["name"] for t in created["tools"]} == {
        "read",
        "add",
        "submit",
        "submit_answer",
    }

    read = step(here, session_id, call("read", {}, "r1"))
    assert read["messages"][0]["content"] == "20" and not read["done"]
    bad = step(here, session_id, call("add", {"amount": "lots"}, "r2"))
    assert bad["messages"][0]["content"].startswith("Error:") and not bad["done"]
    done = step(here, session_id, call("submit_answer", {"answer": "20"}, "r3"))
    assert done["done"] and done["reward"] == 1.0
    assert here.delete(f"/v1/sessions/{session_id}").status_code == 204

    row = poll(
        lambda: here.get(f"/v1/rollouts/{session_id}").json(), lambda r: r.get("status") == "completed"
    )
    assert next(m["content"] for m in row["messages"] if m["role"] == "tool") == "20"
    # The remote side stored its own episode: the calls it answered, closed by our DELETE.
    remote_rows = poll(
        lambda: there.get("/v1/rollouts", params={"env": "counter"}).json()["items"],
        lambda items: bool(items) and items[0]["status"] != "live",
    )
    remote = there.get(f"/v1/rollouts/{remote_rows[0]['id']}").json()
    assert next(m["content"] for m in remote["messages"] if m["role"] == "tool") == "20"
    assert remote["status"] == "abandoned"


def test_a_remote_server_that_goes_away_ends_the_episode_with_a_failure_class(
    gyms: tuple[httpx.Client, httpx.Client, ServerProcess],
) -> None:
    here, _, remote = gyms
    session_id = open_episode(here)["session_id"]
    remote.kill()
    after = step(here, session_id, call("read", {}))
    assert after["messages"][0]["content"].startswith("Error:")
    assert after["done"] and after["reward"] == 0.0
    assert here.delete(f"/v1/sessions/{session_id}").status_code == 204
    row = poll(
        lambda: here.get(f"/v1/rollouts/{session_id}").json(), lambda r: r.get("status") == "completed"
    )
    assert row["failure"] == "env_error"
