"""A small OpenEnv environment written against openenv-core's real base classes, served by its own
`create_app`: guess a seeded number from 1 to 100, told "higher" or "lower" after each guess.

`python -m uvicorn guess_env:app` (from this folder, in the openenv peer's venv) runs it as OpenEnv's
own server; the gym plays it as `openenv/guess` through the manifest (environments/openenv).
"""

from __future__ import annotations

import random
from typing import Any

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field


class GuessAction(Action):
    guess: int = Field(ge=1, le=100, description="a number from 1 to 100")


class GuessObservation(Observation):
    hint: str = ""


class GuessEnvironment(Environment[GuessAction, GuessObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State()
        self._secret = 50

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> GuessObservation:
        self._secret = random.Random(seed).randint(1, 100)
        self._state = State(episode_id=episode_id, step_count=0)
        return GuessObservation(hint="guess a number from 1 to 100")

    def step(self, action: GuessAction, timeout_s: float | None = None, **kwargs: Any) -> GuessObservation:
        self._state.step_count += 1
        if action.guess == self._secret:
            return GuessObservation(hint="correct", done=True, reward=1.0)
        return GuessObservation(hint="higher" if action.guess < self._secret else "lower", reward=0.0)

    @property
    def state(self) -> State:
        return self._state


app = create_app(GuessEnvironment, GuessAction, GuessObservation, env_name="guess", max_concurrent_envs=4)
