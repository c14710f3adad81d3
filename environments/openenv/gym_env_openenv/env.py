"""`openenv/<name>`: an OpenEnv environment, running as OpenEnv's own server, played as a gym environment.

The environment lives in its own process and venv (OpenEnv's `create_app`, its dependencies, whatever
they pin); the gym drives it over loopback with OpenEnv's WebSocket protocol
(`gym_server.protocols.openenv.remote`), one OpenEnv session per gym episode. Each is declared in a
manifest, a TOML file named by `GYM_OPENENV_MANIFEST` (nothing is registered without one)::

    [[environment]]
    name = "guess"                      # served as openenv/guess
    url = "http://127.0.0.1:8001"       # the OpenEnv server (the operator's, never a request's)
    dataset = "/srv/guess-tasks"        # a folder of <split>.jsonl tasks
    description = "Guess a number"      # optional; also system_prompt, max_turns, timeout_s

A task is a gym task whose `metadata.reset` holds the OpenEnv reset's keyword arguments (the episode's
seed is added as `seed` unless the task sets one). The model acts with one tool, `act(action)`, whose
argument is one OpenEnv action (the server's `GET /schema` `action`); each call is one OpenEnv step and
its tool message is the observation as JSON. A malformed action is the server's error, answered as an
error tool message; the episode goes on. The verifier's reward is the episode's return: the sum of the
step rewards the OpenEnv environment reported (unclipped: its range is the environment's), with the
last step's reward and whether the environment said done as components.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from gym_server import Environment, ForkMode, ToolError, VerifyResult, tool
from gym_server.core import jsontext
from gym_server.core.errors import EnvironmentDefinitionError
from gym_server.protocols.openenv.remote import OpenEnvAnswer, OpenEnvConnection, OpenEnvError

__all__ = [
    "MANIFEST_VARIABLE",
    "Manifest",
    "ManifestEntry",
    "OpenEnvEnvironment",
    "environments",
    "make_environment",
]

MANIFEST_VARIABLE = "GYM_OPENENV_MANIFEST"
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


class ManifestEntry(BaseModel):
    """One OpenEnv environment of the manifest."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_\-.]*$", max_length=64)
    url: str = Field(pattern=r"^(https?|wss?)://")
    dataset: Path
    description: str = ""
    system_prompt: str | None = None
    max_turns: int | None = Field(None, ge=1)
    timeout_s: float = Field(30.0, gt=0)


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    environment: list[ManifestEntry] = Field(default_factory=list)


class OpenEnvEnvironment(Environment):
    """Base of every `openenv/<name>` class: a gym episode that is one OpenEnv session on `url`."""

    url: ClassVar[str] = ""
    timeout_s: ClassVar[float] = 30.0
    multi_turn = True
    fork_mode = ForkMode.NONE  # its state lives in an OpenEnv server the gym does not control: not forked

    async def setup(self) -> None:
        self.rewards: list[float] = []
        self.openenv_done = False
        self.connection = OpenEnvConnection(self.url, self.timeout_s, MAX_MESSAGE_BYTES)
        reset = dict(self.task.metadata.get("reset") or {})
        if self.seed is not None:
            reset.setdefault("seed", self.seed)
        try:
            self.first = await self.connection.reset(**reset)
        except BaseException:
            await self.connection.close()
            raise

    def opening_messages(self) -> list[dict[str, Any]]:
        return [*super().opening_messages(), {"role": "user", "content": _observation_text(self.first)}]

    @tool
    async def act(self, action: dict[str, Any]) -> str:
        """Take one action in the OpenEnv environment; returns its observation, reward and done as JSON.

        Args:
            action: one action of the environment, as its OpenEnv server's schema describes it
        """
        try:
            answer = await self.connection.step(action)
        except OpenEnvError as exc:  # a malformed action: the model reads why, the episode goes on
            raise ToolError(f"the environment refused the action: {exc}") from None
        self.rewards.append(answer.reward or 0.0)
        if answer.done:
            self.openenv_done = True
            self.finish("openenv_done")
        return _observation_text(answer)

    async def verify(self) -> VerifyResult:
        rewards = getattr(self, "rewards", [])
        return VerifyResult(
            reward=float(sum(rewards)),
            components={"last_reward": rewards[-1] if rewards else 0.0, "done": float(self.openenv_done)},
            info={"rewards": rewards, "steps": len(rewards), "url": self.url},
        )

    async def close(self) -> None:
        connection: OpenEnvConnection | None = getattr(self, "connection", None)
        if connection is not None:
            await connection.close()


def _observation_text(answer: OpenEnvAnswer) -> str:
    payload = {"observation": answer.observation, "reward": answer.reward, "done": answer.done}
    return jsontext.dumps(payload, default=str).decode()


def make_environment(entry: ManifestEntry) -> type[OpenEnvEnvironment]:
    """The gym environment class of one manifest entry."""
    dataset = entry.dataset.expanduser().resolve()
    attributes: dict[str, Any] = {
        "__module__": __name__,
        "__doc__": entry.description or f"The OpenEnv environment at {entry.url}.",
        "name": f"openenv/{entry.name}",
        "description": entry.description or f"The OpenEnv environment served at {entry.url}",
        "url": entry.url,
        "timeout_s": entry.timeout_s,
        "system_prompt": entry.system_prompt,
        "max_turns": entry.max_turns,
        "dataset_dir": dataset,
    }
    return type(
        f"OpenEnv_{entry.name.replace('-', '_').replace('.', '_')}", (OpenEnvEnvironment,), attributes
    )


def environments() -> list[type[Environment]]:
    """The entry point: one class per environment of the manifest `GYM_OPENENV_MANIFEST` names (none
    without it).

    Raises:
        EnvironmentDefinitionError: the manifest cannot be read or does not validate.
    """
    path = os.environ.get(MANIFEST_VARIABLE)
    if not path:
        return []
    try:
        manifest = Manifest.model_validate(tomllib.loads(Path(path).read_text()))
    except (OSError, tomllib.TOMLDecodeError, ValueError) as exc:
        raise EnvironmentDefinitionError(f"OpenEnv manifest {path!r}: {exc}") from None
    return [make_environment(entry) for entry in manifest.environment]
