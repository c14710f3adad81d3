"""`nemo_gym/<name>`: a running NeMo Gym resources server as a gym environment.

One class per manifest (`manifest.py`), registered together by the entry-point callable `environments()`
from the manifest files named in `GYM_NEMO_GYM_MANIFESTS` (paths separated by `:`), or by a package of
its own with `nemo_gym_environment(path)`. An episode speaks to the server exactly as NeMo Gym's simple
agent does, over its own HTTP client whose cookie jar carries the server's session cookie:
- reset: `POST /seed_session` with the task's row (a refusal or an unreachable server refuses the session
  with 503, naming why);
- a tool call: `POST /<tool>` with the arguments as the body; the answer's body is the tool message
  (an HTTP error status reads `Error: HTTP <status>: <body>`), and the episode goes on;
- verify: `POST /verify` with the row and the transcript as a Responses-API `response`; its `reward` is
  the gym's reward and its `reward_components` (when given) the components.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, ClassVar

import httpx
import orjson

from gym_env_nemo_gym.manifest import NemoGymManifest, load_manifest
from gym_env_nemo_gym.rows import RowsDataset, openai_tools, verify_request
from gym_server import Environment, ForkMode, VerifyResult
from gym_server.core.errors import BackendUnavailable
from gym_server.protocols.nemo_gym.wire import FAILURE_KEY
from gym_server.sdk.messages import tool_message
from gym_server.sdk.tasks import Dataset, Task, TaskFieldError

__all__ = ["MANIFESTS_VARIABLE", "NemoGymResourcesEnv", "environments", "nemo_gym_environment"]

log = logging.getLogger(__name__)

MANIFESTS_VARIABLE = "GYM_NEMO_GYM_MANIFESTS"
_SHOWN_BODY = 500  # characters of an error body shown in a refusal
_VERIFY_ECHOED = frozenset(
    {"responses_create_params", "response", "reward", "reward_components", FAILURE_KEY}
)


class NemoGymResourcesEnv(Environment):
    """An episode of a NeMo Gym resources server. Subclassed once per manifest (`nemo_gym_environment`)."""

    manifest: ClassVar[NemoGymManifest]
    multi_turn = True
    fork_mode = ForkMode.NONE  # its state lives in a NeMo Gym server the gym does not control: not forked

    @classmethod
    def dataset(cls) -> Dataset:
        cached = cls.__dict__.get("_rows_cache")
        if not isinstance(cached, RowsDataset):
            cached = RowsDataset(cls.name, cls.manifest.splits)
            cls._rows_cache = cached  # type: ignore[attr-defined]
        return cached

    @classmethod
    def check_task(cls, task: Task) -> None:
        """The answer is a NeMo Gym row: an object with `responses_create_params.input`."""
        row = task.answer
        params = row.get("responses_create_params") if isinstance(row, dict) else None
        if not isinstance(params, dict) or "input" not in params:
            raise TaskFieldError(
                [("answer", "must be a NeMo Gym row: {responses_create_params: {input, ...}}")]
            )

    def __init__(self, task: Task, seed: int | None = None) -> None:
        super().__init__(task, seed)
        self.row: dict[str, Any] = dict(task.answer)
        self.offered = openai_tools(self.row)
        server = self.manifest.server
        # One client per episode: its cookie jar is this episode's NeMo Gym session, and no other's.
        self.http = httpx.AsyncClient(base_url=str(server.url).rstrip("/"), timeout=server.timeout_s)

    def tools(self) -> list[dict[str, Any]]:
        return self.offered

    async def setup(self) -> None:
        try:
            response = await self.http.post("/seed_session", json=self.row)
        except httpx.HTTPError as exc:
            raise BackendUnavailable(
                f"the NeMo Gym resources server of {self.name!r} did not seed the episode: {exc!r}"
            ) from None
        if response.is_error:
            raise BackendUnavailable(
                f"the NeMo Gym resources server of {self.name!r} refused /seed_session with "
                f"{response.status_code}: {response.text[:_SHOWN_BODY]}"
            )

    async def run_tool_calls(
        self, calls: list[dict[str, Any]], *, tool_timeout_s: float, max_tool_calls: int
    ) -> list[dict[str, Any]]:
        names = [schema["function"]["name"] for schema in self.offered]
        replies: list[dict[str, Any]] = []
        for index, call in enumerate(calls):
            function = call.get("function") or {}
            name = str(function.get("name", ""))
            if index >= max_tool_calls:
                text = f"Error: not executed; at most {max_tool_calls} tool calls run per turn."
            elif name not in names:
                text = f"Error: unknown tool {name[:80]!r}; available tools: {', '.join(names) or 'none'}."
            else:
                text = await self._call(name, function.get("arguments") or "{}")
            replies.append(tool_message(str(call["id"]), name[:256], text))
        return replies

    async def _call(self, name: str, arguments: str | dict[str, Any]) -> str:
        """One tool call as NeMo Gym's agent makes it: the parsed arguments as the JSON body."""
        try:
            parsed = orjson.loads(arguments) if isinstance(arguments, str) else arguments
        except orjson.JSONDecodeError as exc:
            return f"Error: arguments for {name!r} are not valid JSON ({exc})."
        if not isinstance(parsed, dict):
            return f"Error: arguments for {name!r} must be a JSON object, got {type(parsed).__name__}."
        try:
            response = await self.http.post(f"/{name}", json=parsed)
        except httpx.TimeoutException:
            return f"Error: tool {name!r} timed out after {self.manifest.server.timeout_s:g} s."
        except httpx.HTTPError as exc:
            return f"Error: tool {name!r} failed: the resources server is unreachable ({type(exc).__name__})."
        if response.is_error:
            return f"Error: HTTP {response.status_code}: {response.text}"
        return response.text

    async def verify(self) -> VerifyResult:
        """The resources server's `/verify` reward for the episode so far."""
        response = await self.http.post("/verify", json=verify_request(self.row, self.messages, "gym-server"))
        response.raise_for_status()  # no score: the gym records verify_error, never a made-up 0
        answer = response.json()
        components = answer.get("reward_components") or {}
        # What the server adds beyond the request and the reward (e.g. an extracted answer) is kept as info.
        info = {key: value for key, value in answer.items() if key not in _VERIFY_ECHOED}
        failure = answer.get(FAILURE_KEY)  # newer servers mark a score not to train on (judge_failed)
        return VerifyResult(
            reward=float(answer["reward"]),
            components=components,
            info=info,
            failure=str(failure) if failure is not None else None,
        )

    async def close(self) -> None:
        await self.http.aclose()


def nemo_gym_environment(manifest_path: Path) -> type[NemoGymResourcesEnv]:
    """The environment class of one manifest, named `nemo_gym/<manifest name>`.

    Raises:
        ValueError: the manifest does not validate.
    """
    manifest = load_manifest(manifest_path)
    attributes = {
        "name": f"nemo_gym/{manifest.name}",
        "description": manifest.description,
        "max_turns": manifest.max_turns,
        "manifest": manifest,
        "__module__": __name__,
    }
    return type(f"NemoGym_{manifest.name}", (NemoGymResourcesEnv,), attributes)


def environments() -> list[type[NemoGymResourcesEnv]]:
    """The family: one class per manifest named in `GYM_NEMO_GYM_MANIFESTS` (none: no environments)."""
    paths = [Path(part) for part in os.environ.get(MANIFESTS_VARIABLE, "").split(os.pathsep) if part]
    classes: list[type[NemoGymResourcesEnv]] = []
    for path in paths:
        try:
            classes.append(nemo_gym_environment(path))
        except (OSError, ValueError) as exc:
            log.error("NeMo Gym manifest %s is not offered: %s", path, exc)
    return classes
