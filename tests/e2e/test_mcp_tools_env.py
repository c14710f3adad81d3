"""An MCP server as a gym environment, end to end: the real `mcp-server-time` from PyPI, started in a real
bubblewrap sandbox by a real `gym-server serve`, driven through the native /v1/sessions API.

What is proven: the server's tools (from its `tools/list`) are the session's tools; a tool call is a
step answered by the server itself and stored in the trajectory; arguments the server rejects come back
as its own error in a tool message and the episode goes on; a correct `submit_answer` scores 1.0; a
server killed mid-episode ends the episode, stored with `sandbox_error`; close and the TTL leave no
server process behind; a server that stops answering ends the episode with `sandbox_timeout`.

Needs bubblewrap and the example server in the sandbox tools folder (`make mcp-tools`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import ServerProcess
from gymtest import call, poll

from gym_env_mcp_tools.env import mcp_environment
from gym_env_mcp_tools.time.generate import accepted, offset_minutes
from gym_server.sandbox.toolbox import check_tools_dir

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
TOOLS_DIR = Path(os.environ.get("GYM_SANDBOX__TOOLS_DIR") or REPO / "var" / "gym-tools")
ENV = "mcp_tools/time"
SERVER_MODULE = b"mcp_server_time"

if shutil.which("bwrap") is None:
    pytest.skip("bubblewrap is not installed (Debian: apt-get install bubblewrap)", allow_module_level=True)
if not (TOOLS_DIR / "mcp-server-time" / "mcp_server_time").is_dir():
    pytest.skip(f"mcp-server-time is not in {TOOLS_DIR}: run `make mcp-tools`", allow_module_level=True)


def server_pids() -> set[int]:
    """Host pids of running `mcp_server_time` processes that this test process started (through its gym
    server and that server's sandboxes), seen from outside.

    Only descendants count: under xdist another worker's test runs its own MCP servers at the same time.
    """
    argvs: dict[int, list[bytes]] = {}
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            pid = int(entry.name)
            argvs[pid] = argv
            parents[pid] = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state letter

    def descends_from_this_test(pid: int) -> bool:
        while pid > 1:
            if pid == os.getpid():
                return True
            pid = parents.get(pid, 0)
        return False

    return {
        pid
        for pid, argv in argvs.items()
        if SERVER_MODULE in argv and not argv[0].endswith(b"bwrap") and descends_from_this_test(pid)
    }


@pytest.fixture(scope="module")
def tools_dir() -> Iterator[Path]:
    """The tools folder where the sandboxes' uids can reach it.

    A clone below a private folder (root's home is 0700) cannot be shown to other uids, and the server
    rightly refuses it; the tests then run on a copy in a world-passable temporary folder.
    """
    try:
        check_tools_dir(TOOLS_DIR)
    except ValueError:
        with tempfile.TemporaryDirectory(prefix="gym-tools-") as scratch:
            copy = Path(scratch) / "tools"
            Path(scratch).chmod(0o755)
            shutil.copytree(TOOLS_DIR, copy, symlinks=True)
            copy.chmod(0o755)
            yield copy
    else:
        yield TOOLS_DIR


@pytest.fixture
def gym(
    server_factory: Callable[..., ServerProcess], tmp_path: Path, tools_dir: Path
) -> Iterator[httpx.Client]:
    server = server_factory(
        f"sqlite:///{tmp_path / 'gym.db'}",
        GYM_SANDBOX__BACKEND="bubblewrap",
        GYM_SANDBOX__TOOLS_DIR=str(tools_dir),
        GYM_SESSIONS__REAP_INTERVAL_S="0.2",
    )
    server.start()
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client
    server.stop()


MANIFEST = REPO / "environments" / "mcp_tools" / "gym_env_mcp_tools" / "time" / "manifest.json"


def task(task_id: str) -> Any:
    found = mcp_environment(MANIFEST).dataset().get(task_id)
    assert found is not None
    return found


def open_episode(gym: httpx.Client, task_id: str | None, **extra: Any) -> tuple[dict[str, Any], set[int]]:
    before = server_pids()
    created = gym.post("/v1/sessions", json={"env": ENV, "task_id": task_id, "seed": 0, **extra})
    assert created.status_code == 201, created.text
    started = server_pids() - before
    assert len(started) == 1, f"expected one new MCP server process, saw {started}"
    return created.json(), started


def step(gym: httpx.Client, session_id: str, message: dict[str, Any]) -> dict[str, Any]:
    response = gym.post(f"/v1/sessions/{session_id}/step", json={"message": message})
    assert response.status_code == 200, response.text
    return dict(response.json())


def stored(gym: httpx.Client, session_id: str, status: str) -> dict[str, Any]:
    return poll(lambda: gym.get(f"/v1/rollouts/{session_id}").json(), lambda row: row.get("status") == status)


def gone(pids: set[int]) -> bool:
    return not (pids & server_pids())


def test_episode_calls_the_real_server_scores_and_is_stored(gym: httpx.Client) -> None:
    meta = task("mcp-time-00000").metadata  # Tokyo 21:10 -> Dubai
    created, pids = open_episode(gym, "mcp-time-00000")
    session_id = created["session_id"]
    names = {tool["function"]["name"] for tool in created["tools"]}
    assert names == {"convert_time", "get_current_time", "submit_answer"}
    schema = next(t for t in created["tools"] if t["function"]["name"] == "convert_time")["function"]
    assert set(schema["parameters"]["required"]) == {"source_timezone", "time", "target_timezone"}

    args = {"source_timezone": meta["source"], "time": meta["time"], "target_timezone": meta["target"]}
    converted = step(gym, session_id, call("convert_time", args, "c1"))
    reply = json.loads(converted["messages"][0]["content"])  # the server's own JSON answer
    assert reply["target"]["timezone"] == "Asia/Dubai"
    assert reply["target"]["datetime"][11:16] == "16:10"
    assert converted["done"] is False

    # Arguments the server rejects: its validation error is the tool message; the episode goes on.
    missing = step(
        gym, session_id, call("convert_time", {"source_timezone": "Asia/Tokyo", "time": "21:10"}, "c2")
    )
    assert missing["messages"][0]["content"].startswith("Error:")
    assert "target_timezone" in missing["messages"][0]["content"]
    assert missing["done"] is False
    bad_zone = step(gym, session_id, call("convert_time", {**args, "target_timezone": "Mars/Olympus"}, "c3"))
    assert bad_zone["messages"][0]["content"].startswith("Error:")
    assert "Mars/Olympus" in bad_zone["messages"][0]["content"]
    not_json = step(gym, session_id, call("convert_time", "{oops", "c4"))
    assert "not valid JSON" in not_json["messages"][0]["content"] and not_json["done"] is False

    submitted = step(gym, session_id, call("submit_answer", {"answer": "16:10"}, "c5"))
    assert submitted["done"] is True and submitted["reward"] == 1.0
    assert gym.delete(f"/v1/sessions/{session_id}").status_code == 204
    assert poll(lambda: gone(pids), bool, timeout_s=10)

    row = stored(gym, session_id, "completed")
    assert row["reward"] == 1.0 and row["failure"] is None and row["env"] == ENV
    tool_replies = [m for m in row["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_replies] == ["c1", "c2", "c3", "c4", "c5"]
    assert json.loads(tool_replies[0]["content"])["target"]["datetime"][11:16] == "16:10"
    assert row["components"]["tool_calls"] == 4.0
    assert row["verify_info"]["server"]["name"] == "mcp-time"


def test_an_inline_tasks_files_are_in_the_servers_work_dir(gym: httpx.Client) -> None:
    files = {"notes.txt": "meeting at 09:30 Tokyo time\n", "data/zones.csv": "Asia/Tokyo,+9\n"}
    task = {"id": "with-files", "prompt": "Read notes.txt.", "answer": "00:30", "metadata": {"files": files}}
    created, pids = open_episode(gym, None, task=task)
    (pid,) = pids
    for name, text in files.items():  # the server's own view of its work dir, from the host
        assert (Path(f"/proc/{pid}/root/work") / name).read_text() == text
    assert gym.delete(f"/v1/sessions/{created['session_id']}").status_code == 204
    assert poll(lambda: gone(pids), bool, timeout_s=10)


def test_a_wrong_answer_scores_zero(gym: httpx.Client) -> None:
    row_task = task("mcp-time-00001")
    created, pids = open_episode(gym, row_task.id)
    wrong = "23:59" if "23:59" not in row_task.answer else "00:01"
    submitted = step(gym, created["session_id"], call("submit_answer", {"answer": wrong}))
    assert submitted["done"] is True and submitted["reward"] == 0.0
    assert gym.delete(f"/v1/sessions/{created['session_id']}").status_code == 204
    assert poll(lambda: gone(pids), bool, timeout_s=10)


def test_a_server_that_dies_mid_episode_is_stored_with_a_failure_class(gym: httpx.Client) -> None:
    created, pids = open_episode(gym, "mcp-time-00002")
    session_id = created["session_id"]
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    args = {"source_timezone": "Etc/UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
    after = step(gym, session_id, call("convert_time", args))
    # whether the connection saw the exit before this call or during it is a race: both say it is gone
    assert after["messages"][0]["content"].startswith(
        ("Error: the MCP server exited", "Error: the MCP server is not running")
    )
    assert after["done"] is True and after["reward"] == 0.0
    assert after["info"]["done_reason"] == "mcp_server_exited"
    assert gym.delete(f"/v1/sessions/{session_id}").status_code == 204
    row = stored(gym, session_id, "completed")
    assert row["failure"] == "sandbox_error"
    assert "exited" in row["verify_info"]["error"] or "not running" in row["verify_info"]["error"]


def test_a_server_that_stops_answering_ends_the_episode_with_a_timeout(gym: httpx.Client) -> None:
    created, pids = open_episode(gym, "mcp-time-00004")
    session_id = created["session_id"]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)  # alive but silent: the call runs into the manifest's call_timeout_s
    args = {"source_timezone": "Etc/UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
    after = step(gym, session_id, call("convert_time", args))
    assert after["messages"][0]["content"] == (
        "Error: tool 'convert_time' did not answer within 10 s. The episode ends."
    )
    assert after["done"] is True and after["reward"] == 0.0
    assert after["info"]["done_reason"] == "mcp_server_timeout"
    assert gym.delete(f"/v1/sessions/{session_id}").status_code == 204
    assert poll(lambda: gone(pids), bool, timeout_s=10)  # a stopped process is killed all the same
    assert stored(gym, session_id, "completed")["failure"] == "sandbox_timeout"


def test_the_ttl_kills_the_server_and_stores_the_episode(gym: httpx.Client) -> None:
    created, pids = open_episode(gym, "mcp-time-00003", ttl_s=1)
    assert poll(lambda: gone(pids), bool, timeout_s=15)
    row = stored(gym, created["session_id"], "expired")
    assert row["failure"] == "expired"


def test_a_server_that_cannot_start_refuses_the_session_naming_why(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    server = server_factory(f"sqlite:///{tmp_path / 'gym.db'}", GYM_SANDBOX__BACKEND="bubblewrap")
    server.start()  # no tools folder: the sandbox has no mcp_server_time to run
    before = server_pids()
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            refused = client.post("/v1/sessions", json={"env": ENV, "task_id": "mcp-time-00000"})
            assert refused.status_code == 503, refused.text
            assert refused.headers["content-type"].startswith("application/problem+json")
            assert "GYM_SANDBOX__TOOLS_DIR" in refused.json()["detail"]
            assert client.get("/readyz").status_code == 200  # the server itself is fine
    finally:
        server.stop()
    assert not server_pids() - before


def test_answers_hold_on_any_date() -> None:
    """The tasks use zones without daylight saving time, so the server's 'today' cannot change them."""
    for row in mcp_environment(MANIFEST).dataset().tasks():
        meta = row.metadata
        hours, minutes = map(int, meta["time"].split(":"))
        shift = offset_minutes(meta["target"]) - offset_minutes(meta["source"])
        expected = accepted(hours * 60 + minutes + meta.get("duration_min", 0) + shift)
        assert row.answer == expected, row.id
