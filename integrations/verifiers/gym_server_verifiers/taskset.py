"""A gym-server environment as a verifiers taskset: its tasks are the rows, each rollout one episode.

- `load()` lists the environment's tasks from the gym (`GET /v1/environments/{env}/tasks`): one row
  per (task, seed). The row's prompt is the task's public prompt; the rollout replaces it with the
  episode's own opening messages.
- `GymTask.setup` opens the episode (`POST /v1/sessions` with env, task, seed, split, run) and puts
  its session id and tools in the rollout's `GymState`, so the tool server (`GymToolset`) steps it.
- `finalize` sends a final plain-text answer as the last step (environments such as `math` end on
  one), scores the episode (`POST .../verify`) and closes it (`DELETE`), so the gym stores it.
- The `gym` reward is the gym's verified reward. A gym that is unreachable, refused the episode, or
  reported a failure class gives no reward: scoring raises, verifiers records the error on the
  trace and leaves the reward unscored (`None`), never a 0 that would be trained on.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import verifiers.v1 as vf
from pydantic import Field, SecretStr

from gym_server_verifiers.gym import GymError, list_tasks, request
from gym_server_verifiers.toolset import GymState, GymToolset

__all__ = [
    "API_KEY_VARIABLE",
    "GymConfig",
    "GymData",
    "GymTask",
    "GymTaskConfig",
    "GymTaskset",
    "close_episode",
]


API_KEY_VARIABLE = "GYM_API_KEY"


class GymTaskConfig(vf.TaskConfig):
    base_url: str = "http://127.0.0.1:8000"
    """The gym server's URL."""
    api_key: SecretStr | None = None
    """The gym's API key (scope `episodes`), sent as `Authorization: Bearer` on every gym call. Unset:
    `GYM_API_KEY` from the environment; neither: no key (a gym on loopback with keys off). Dumped as
    `**********`, so it never reaches verifiers' saved config or logs."""
    run: str | None = None
    """The gym run the episodes are stored under (`GET /v1/rollouts?run=...`)."""
    request_timeout: float = Field(60.0, gt=0)
    """Seconds one gym call may take."""

    def gym_api_key(self) -> str | None:
        """The key to send: `api_key`, else `GYM_API_KEY`, else None."""
        if self.api_key is not None:
            return self.api_key.get_secret_value()
        return os.environ.get(API_KEY_VARIABLE) or None


class GymConfig(vf.TasksetConfig):
    env: str = ""
    """The gym environment, e.g. `counter` or `reasoning_gym/leg_counting` (required: the default
    is empty only because verifiers' CLI builds the config from its id before reading options)."""
    split: str | None = None
    """The dataset split to list tasks from (the gym's default when unset)."""
    task_ids: list[str] | None = None
    """Only these tasks (all listed tasks when unset)."""
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    """Gym seeds: each task is one row per seed (the seed fixes the episode's start state)."""
    tools: vf.SharedToolsetConfig = vf.SharedToolsetConfig()
    task: GymTaskConfig = GymTaskConfig()


class GymData(vf.TaskData):
    env: str
    task_id: str
    seed: int
    split: str | None = None


class GymTask(vf.Task[GymData, GymState, GymTaskConfig]):
    @property
    def key(self) -> str:
        return f"{self.data.env}/{self.data.task_id}@{self.data.seed}"

    async def setup(self, trace: vf.Trace) -> None:
        state: GymState = trace.state
        state.base_url, state.request_timeout = self.config.base_url, self.config.request_timeout
        state.api_key = self.config.gym_api_key()
        session = await request(
            "POST",
            state.base_url,
            "/v1/sessions",
            timeout_s=state.request_timeout,
            api_key=state.api_key,
            body={
                "env": self.data.env,
                "task_id": self.data.task_id,
                "seed": self.data.seed,
                "split": self.data.split,
                "run": self.config.run,
                "policy": {"model": trace.agent.config.model},
            },
        )
        state.session_id, state.tools = session["session_id"], session["tools"]
        trace.info["gym"] = {"session_id": state.session_id, "env_version": session["env_version"]}
        # The conversation starts from the episode's own opening messages (system prompt included).
        data = trace.task.data
        opening = type(data).model_validate({**data.model_dump(), "prompt": session["messages"]})
        trace.task = trace.task.model_copy(update={"data": opening})

    async def finalize(self, trace: vf.Trace) -> None:
        state: GymState = trace.state
        if state.session_id is None:
            return
        try:
            if not state.done and state.error is None:
                await self._send_final_answer(trace, state)
            if state.error is None:
                verdict = await self._call(state, "POST", "/verify")
                state.reward, state.components = verdict["reward"], verdict["components"]
                state.failure = verdict.get("failure")
        except GymError as exc:
            state.error = str(exc)
        finally:
            await close_episode(state)
        shown = {"steps", "done", "components", "failure", "error", "info"}
        trace.info["gym"] |= state.model_dump(include=shown)

    async def _send_final_answer(self, trace: vf.Trace, state: GymState) -> None:
        """A last assistant message without tool calls is the episode's answer: send it as a step."""
        last = trace.messages[-1] if trace.messages else None
        if last is None or last.role != "assistant" or getattr(last, "tool_calls", None) or not last.content:
            return
        result = await self._call(
            state, "POST", "/step", {"message": {"role": "assistant", "content": last.content}}
        )
        state.steps += 1
        state.done, state.info = bool(result["done"]), dict(result["info"])

    async def _call(
        self, state: GymState, method: str, action: str, body: dict[str, Any] | None = None
    ) -> Any:
        path = f"/v1/sessions/{state.session_id}{action}"
        return await request(
            method, state.base_url, path, timeout_s=state.request_timeout, api_key=state.api_key, body=body
        )

    @vf.stop
    async def episode_over(self, trace: vf.Trace) -> bool:
        """No more model turns once the gym ended the episode or could not be used."""
        state: GymState = trace.state
        return state.done or state.error is not None

    @vf.metric
    async def gym_steps(self, trace: vf.Trace) -> float:
        return float(trace.state.steps)

    @vf.reward
    async def gym(self, trace: vf.Trace) -> float:
        state: GymState = trace.state
        if state.error is not None:
            raise GymError(f"no reward: {state.error}")
        if state.failure is not None:
            raise GymError(f"no reward: the gym marked episode {state.session_id} {state.failure!r}")
        if state.reward is None:
            raise GymError(f"no reward: episode {state.session_id} was never scored")
        return state.reward


async def close_episode(state: GymState, failure: str | None = None) -> None:
    """Close the rollout's episode once (the gym stores it), with the gym's client `failure` class."""
    if state.session_id is None or state.closed:
        return
    state.closed = True
    query = f"?failure={failure}" if failure else ""
    try:
        await request(
            "DELETE",
            state.base_url,
            f"/v1/sessions/{state.session_id}{query}",
            timeout_s=state.request_timeout,
            api_key=state.api_key,
        )
    except GymError as exc:
        if exc.status not in (404, 410):  # already gone: nothing left to close
            state.error = state.error or str(exc)


class GymTaskset(vf.Taskset[GymTask, GymConfig]):
    @classmethod
    def toolsets(cls, config: GymConfig) -> list[vf.Toolset]:
        return [GymToolset(config.tools)]

    def load(self) -> Iterator[GymTask]:
        config = self.config
        if not config.env:
            raise ValueError("name the gym environment: --env.taskset.env ENV")
        tasks = list_tasks(
            config.task.base_url,
            config.env,
            config.split,
            timeout=config.task.request_timeout,
            api_key=config.task.gym_api_key(),
        )
        if config.task_ids is not None:
            wanted = set(config.task_ids)
            missing = wanted - {task["id"] for task in tasks}
            if missing:
                raise ValueError(f"gym environment {config.env!r} has no tasks {sorted(missing)}")
            tasks = [task for task in tasks if task["id"] in wanted]
        for task in tasks:
            for seed in config.seeds:
                data = GymData(
                    id=task["id"],
                    name=f"{config.env}/{task['id']}@{seed}",
                    prompt=task["prompt"],
                    env=config.env,
                    task_id=task["id"],
                    seed=seed,
                    split=config.split,
                )
                yield GymTask(data, config.task)
