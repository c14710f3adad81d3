"""What openenv-core 0.3.0's own checker and clients require of an OpenEnv server, against the facade.

- `openenv validate --url BASE` (openenv-core's runtime check, its real CLI from this venv): every
  criterion passes on a facade's base URL (`/openapi.json` with a version and the simulation-mode
  routes, `/health`, `/metadata`, `/schema`, `/mcp`).
- `MCPToolClient` lists tools right after connecting, before any reset (its docstring's example), and
  reads `state()` before a reset, as OpenEnv's own server allows.
- A tool call that ends the episode without a reply (the `tool_call` environment scores the call and
  never runs it) is a success: `call_tool` returns instead of raising.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import Gym
from openenv.core import MCPToolClient
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation

EPISODE = "gym-server/episode"
OPENENV_CLI = Path(sys.executable).with_name("openenv")


def test_openenv_validate_passes_against_a_facade(gym: Gym) -> None:
    for env in ("counter", "tool_call"):
        run = subprocess.run(
            [str(OPENENV_CLI), "validate", "--url", gym.env_url(env, "openenv")],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "NO_COLOR": "1"},
        )
        report = json.loads(run.stdout)
        failed = [c for c in report["criteria"] if not c["passed"]]
        assert run.returncode == 0 and report["passed"] is True, failed or run.stderr
        assert report["mode"] == "simulation" and report["standard_profile"] == "openenv-http/1.x"
        assert report["summary"]["passed_count"] == report["summary"]["total_count"] == 6


def test_tools_and_state_before_a_reset(gym: Gym) -> None:
    _, catalog = gym.get("/v1/environments/counter")
    with MCPToolClient(base_url=gym.env_url("counter", "openenv")).sync() as env:
        tools = env.list_tools()  # first thing after connecting, as openenv-core's example does
        assert [tool.name for tool in tools] == [t["function"]["name"] for t in catalog["tools"]]
        assert tools[1].input_schema["properties"]["amount"]["type"] == "integer"
        fresh = env.state()
        assert (fresh.episode_id, fresh.step_count) == (None, 0)
        opened = env.reset(task_id="counter-0000", seed=0)
        session_id = opened.observation.metadata[EPISODE]["session_id"]
        assert env.state().episode_id == session_id
        assert env.call_tool("read").isdigit()
    assert gym.stored(session_id, "abandoned")["num_turns"] == 1


def test_a_call_that_ends_the_episode_without_a_reply_is_a_success(gym: Gym) -> None:
    with MCPToolClient(base_url=gym.env_url("tool_call", "openenv")).sync() as env:
        opened = env.reset(task_id="tool_call-00001")
        session_id = opened.observation.metadata[EPISODE]["session_id"]
        assert env.call_tool("list_events", date="2025-03-29") is None  # no error raised: no output
    stored = gym.stored(session_id, "completed")
    assert stored["reward"] == 1.0 and stored["failure"] is None
    with MCPToolClient(base_url=gym.env_url("tool_call", "openenv")).sync() as env:
        env.reset(task_id="tool_call-00001")
        result = env.step(CallToolAction(tool_name="list_events", arguments={"date": "2025-03-29"}))
        assert isinstance(result.observation, CallToolObservation)
        assert result.observation.error is None and (result.done, result.reward) == (True, 1.0)
