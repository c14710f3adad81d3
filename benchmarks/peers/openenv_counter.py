"""The benchmark's counter episode as an environment of OpenEnv's own, served by openenv-core's `create_app`.

`benchmarks/protocols.py` plays the same episode (reset, `add(1)` K-1 times, `submit`) against this
server and against the gym's OpenEnv facade, with the same client frames, so the two rows differ only in
the server. It takes OpenEnv's `CallToolAction` (the action the gym's facade speaks) and keeps the
counter in memory, as OpenEnv's example environments keep their state: nothing is stored, which is the
work the gym does on top (a trajectory row per episode, acknowledged closes).

Runs in the openenv peer's venv (tests/interop/openenv, openenv-core 0.3.0), never in the gym's:
`python -m uvicorn --app-dir benchmarks/peers openenv_counter:app --loop uvloop --http httptools`.
"""

from __future__ import annotations

import os
import random
from typing import Any

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
from openenv.core.env_server.types import State


class CounterEnvironment(Environment[CallToolAction, CallToolObservation, State]):
    """Bring a counter from a seeded start to a seeded target with `add`, then `submit`."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State()
        self.value = self.target = 0

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> CallToolObservation:
        draw = random.Random(seed)
        self.value, self.target = draw.randint(0, 50), draw.randint(0, 50)
        self._state = State(episode_id=episode_id, step_count=0)
        return CallToolObservation(tool_name="reset", result=str(self.value))

    def step(
        self, action: CallToolAction, timeout_s: float | None = None, **kwargs: Any
    ) -> CallToolObservation:
        self._state.step_count += 1
        if action.tool_name == "add":
            self.value += int(action.arguments.get("amount", 0))
            return CallToolObservation(tool_name="add", result=str(self.value), reward=0.0)
        reward = 1.0 if self.value == self.target else 0.0
        return CallToolObservation(
            tool_name=action.tool_name, result=str(self.value), done=True, reward=reward
        )

    @property
    def state(self) -> State:
        return self._state


app = create_app(
    CounterEnvironment,
    CallToolAction,
    CallToolObservation,
    env_name="counter",
    max_concurrent_envs=int(os.environ.get("OPENENV_MAX_SESSIONS", "10000")),
)
