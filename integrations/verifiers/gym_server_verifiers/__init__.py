"""Play gym-server environments from Prime Intellect's verifiers (0.4): a taskset plugin.

verifiers finds a taskset by id: `vf-eval gym-server-verifiers --env.taskset.env counter ...` (or
`vf.load_environment(vf.resolve_env_config({"taskset": {"id": "gym-server-verifiers", ...}}))`)
imports this module and takes the `Taskset` and the `Harness` it exports. `load_environment` here
is the same with keyword arguments. The gym is reached over HTTP only: nothing of gym-server is
imported, and this package needs nothing verifiers does not already install.
"""

from __future__ import annotations

from typing import Any

import verifiers.v1 as vf
from verifiers.v1.harnesses.null import NullHarness
from verifiers.v1.runtimes import Runtime, SubprocessConfig

from gym_server_verifiers.gym import GymError
from gym_server_verifiers.taskset import GymConfig, GymData, GymTask, GymTaskConfig, GymTaskset, close_episode
from gym_server_verifiers.toolset import GymState, GymToolset

__all__ = [
    "TASKSET_ID",
    "GymConfig",
    "GymData",
    "GymError",
    "GymHarness",
    "GymState",
    "GymTask",
    "GymTaskConfig",
    "GymTaskset",
    "GymToolset",
    "load_environment",
]

TASKSET_ID = "gym-server-verifiers"


class GymHarness(NullHarness):
    """This taskset's default program: verifiers' plain tool-calling chat loop, offered the gym
    episode's tools and nothing else (the stock default, `bash`, would add a shell and an editor)."""

    async def cleanup(self, trace: vf.Trace, runtime: Runtime) -> None:
        """verifiers skips `finalize` on a rollout that failed (the harness or the model broke): its
        episode is closed here with the gym's `policy_error` class, so the gym stores it as failed
        at once instead of waiting out its TTL. Called after every rollout; a no-op once closed."""
        if isinstance(trace.state, GymState):
            await close_episode(trace.state, failure="policy_error")


def load_environment(
    base_url: str,
    env: str,
    *,
    split: str | None = None,
    task_ids: list[str] | None = None,
    seeds: list[int] | None = None,
    run: str | None = None,
    request_timeout: float = 60.0,
    api_key: str | None = None,
    **agent: Any,
) -> vf.Env:
    """The verifiers `Env` playing gym environment `env` at `base_url`: one row per (task, seed),
    episodes stored under gym run `run`, with `api_key` (else `GYM_API_KEY`) when the gym requires keys.
    `agent` overrides the agent seat's config (`max_turns`, `timeout`, ...); its program runs as a local
    subprocess unless `runtime` says otherwise."""
    taskset = {
        "id": TASKSET_ID,
        "env": env,
        "split": split,
        "task_ids": task_ids,
        "seeds": seeds if seeds is not None else [0],
        "task": {"base_url": base_url, "run": run, "request_timeout": request_timeout, "api_key": api_key},
    }
    seat = {"runtime": SubprocessConfig().model_dump(), **agent}
    return vf.load_environment(vf.resolve_env_config({"taskset": taskset, "agent": seat}))
