"""Server-driven rollouts: `POST /v1/rollouts` plays whole episodes against a policy URL and stores them.

The gym runs the same `RolloutDriver` a trainer would, in process, against its own session manager (no
HTTP round trip to itself), so every episode leaves the usual trajectory row, with per-turn token ids,
logprobs and loss masks in `turns` when the policy is token-in:

- `policy.api = "completions"` (default): token-exact. The policy must serve vLLM's token-in
  `/v1/completions` and `/tokenize` + `/detokenize` (vLLM and `gym-server policy serve` do); the chat
  template is the policy's, applied through `/tokenize`, so this process needs no tokenizer.
- `policy.api = "chat"`: any OpenAI-compatible chat API; transcripts and rewards only (evaluation).

A run is a background job: 202 with its id at once, progress at `GET /v1/rollouts/runs/{run_id}`
(jobs live in this process's memory within the bounds of `gym_server.sessions.rollout_runs`; the trajectories
are in the store). `wait: true` answers when the run is finished instead. A policy failure ends its
episode with failure `policy_error` or `policy_timeout` (status `failed`), never a lost episode.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import replace
from functools import partial
from typing import Any, Literal

from fastapi import APIRouter, Response, status
from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from gym_server.api.deps import ManagerDep, PolicyRunsDep, RegistryDep, RunBoardDep, TenantDep
from gym_server.core import jsontext
from gym_server.core.egress import refusal
from gym_server.core.errors import EndpointNotAllowed, GymError, InvalidRequest, NotFoundError
from gym_server.core.problems import StrictJsonRoute
from gym_server.sdk.tasks import Task
from gym_server.sessions.buffered_play import admit_when_room, play_groups
from gym_server.sessions.manager import SessionManager
from gym_server.sessions.policy_runs import PolicyRuns
from gym_server.sessions.rollout_runs import RolloutRun
from gym_server.store.records import BUFFER_GROUP_KEY, DEFAULT_TENANT, NAME_MAX_CHARS, NAME_PATTERN
from gym_trainer.chat import Renderer
from gym_trainer.client import GymAPIError, SessionInfo, StepResult, VerifyResult
from gym_trainer.driver import (
    CLIENT_FAILURES,
    DriverConfig,
    EpisodeSpec,
    Rollout,
    RolloutDriver,
)
from gym_trainer.remote_chat import RemoteRenderer
from gym_trainer.samplers import (
    ChatSampler,
    CompletionsSampler,
    OpenAIChatSampler,
    SamplingParams,
    TokenSampler,
)

__all__ = ["ManagerBackend", "RolloutRunRequest", "router"]

router = APIRouter(prefix="/v1/rollouts", tags=["rollouts"], route_class=StrictJsonRoute)


class PolicySpec(BaseModel):
    """Where the policy is served (one of the operator's `GYM_ROLLOUT_RUNS__POLICY_URLS`), and how to
    talk to it. The key is sent only there, and never stored or logged."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(min_length=1, max_length=2048, examples=["http://127.0.0.1:8001"])
    model: str = Field(min_length=1, max_length=NAME_MAX_CHARS, pattern=r"^[^\x00]*$")
    api: Literal["completions", "chat"] = "completions"
    api_key: SecretStr | None = None
    timeout_s: float = Field(300.0, gt=0, le=3600)


class SamplingSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_tokens: int = Field(512, ge=1, le=131072)
    temperature: float = Field(1.0, ge=0, le=10)
    top_p: float = Field(1.0, gt=0, le=1)
    seed: int | None = Field(None, ge=0, le=2**62)


class RolloutRunRequest(BaseModel):
    """POST /v1/rollouts: which tasks, how many episodes each, which policy, what budgets."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "env": "counter",
                    "split": "validation",
                    "limit": 10,
                    "n": 4,
                    "policy": {"base_url": "http://127.0.0.1:8001", "model": "tiny"},
                }
            ]
        },
    )

    env: str = Field(min_length=1, max_length=128)
    task_ids: list[str] | None = Field(None, min_length=1, max_length=10000)
    split: str | None = Field(None, max_length=64)
    limit: int | None = Field(None, ge=1, le=10000)
    n: int = Field(1, ge=1, le=256, description="episodes per task (a GRPO group), same task and seed")
    seed: int | None = Field(None, ge=0, le=2**62, description="gym seed of every task's start state")
    run: str | None = Field(None, max_length=NAME_MAX_CHARS, pattern=NAME_PATTERN)
    policy: PolicySpec
    sampling: SamplingSpec = Field(default_factory=SamplingSpec)
    max_turns: int = Field(8, ge=1, le=1024)
    max_completion_tokens: int = Field(2048, ge=1, le=1_000_000)
    concurrency: int = Field(
        16, ge=1, le=1024, description="episodes played at once, at most the server's max_concurrency"
    )
    wait: bool = Field(False, description="answer when the run is finished instead of at once")
    buffer: bool = Field(
        False,
        description="produce for the rollout buffer: `run` names an announced policy run, each task's n "
        "episodes are one group, played once the run admits it (docs/rollout-buffer.md)",
    )

    @model_validator(mode="after")
    def _tasks(self) -> RolloutRunRequest:
        if self.task_ids is not None and (self.split is not None or self.limit is not None):
            raise ValueError("give task_ids, or split/limit, not both")
        if self.buffer and self.run is None:
            raise ValueError("buffer: true needs the policy run's name in `run`")
        return self


class ManagerBackend:
    """The driver's `GymBackend` over this process's session manager: no HTTP to ourselves.

    Each session it opens holds one of `slots` (the runs' share of the server's sessions) from before
    it is created until it is closed; `aclose` closes whatever a driver left open, so a slot is never
    lost with a session.
    """

    def __init__(self, manager: SessionManager, slots: asyncio.Semaphore) -> None:
        self.manager = manager
        self.slots = slots
        self._held: set[str] = set()

    async def aclose(self) -> None:
        for session_id in list(self._held):
            with contextlib.suppress(GymAPIError):
                await self.close(session_id)

    async def create_session(
        self,
        env: str,
        *,
        task_id: str | None = None,
        task: dict[str, Any] | None = None,
        seed: int | None = None,
        ttl_s: float | None = None,
        run: str | None = None,
        policy: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> SessionInfo:
        await self.slots.acquire()  # waits while the runs hold their whole share
        try:
            session = await self.manager.create(
                env,
                task_id=task_id,
                task=Task.model_validate(task) if task is not None else None,
                seed=seed,
                ttl_s=ttl_s,
                run=run,
                policy=policy,
                metadata=metadata,
            )
        except BaseException as exc:
            self.slots.release()
            if isinstance(exc, GymError):
                raise _api_error(exc, "POST", "/v1/sessions") from exc
            raise
        self._held.add(session.id)
        return SessionInfo(
            session_id=session.id,
            env=session.entry.name,
            env_version=session.entry.version,
            task_id=session.env.task.id,
            seed=session.env.seed,
            messages=list(session.env.messages),
            tools=list(session.tools),
            max_turns=session.max_turns,
            expires_at=session.expires_at().isoformat(),
            base_url="",
        )

    async def step(
        self, session_id: str, message: dict[str, Any], turn_data: dict[str, Any] | None = None
    ) -> StepResult:
        try:
            result = await self.manager.step(session_id, message, turn_data)
        except GymError as exc:
            raise _api_error(exc, "POST", f"/v1/sessions/{session_id}/step") from exc
        return StepResult(list(result.messages), result.done, result.reward, dict(result.info))

    async def record_truncated_turn(
        self, session_id: str, content: str, turn_data: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        try:
            turns, failure = await self.manager.record_truncated_turn(session_id, content, turn_data)
        except GymError as exc:
            raise _api_error(exc, "POST", f"/v1/sessions/{session_id}/truncated-turn") from exc
        return {"turns": turns, "failure": failure}

    async def verify(self, session_id: str) -> VerifyResult:
        try:
            result = await self.manager.verify(session_id)
        except GymError as exc:
            raise _api_error(exc, "POST", f"/v1/sessions/{session_id}/verify") from exc
        return VerifyResult(result.reward, dict(result.components), dict(result.info), result.failure)

    async def close(self, session_id: str, *, failure: str | None = None) -> None:
        try:
            if failure in CLIENT_FAILURES:
                session = self.manager.get(session_id)
                session.failure = session.failure or failure
            await self.manager.close(session_id)
        except GymError as exc:
            raise _api_error(exc, "DELETE", f"/v1/sessions/{session_id}") from exc
        finally:
            if session_id in self._held:  # closed now, or already gone (expired): the slot is free
                self._held.discard(session_id)
                self.slots.release()


def _api_error(exc: GymError, method: str, path: str) -> GymAPIError:
    return GymAPIError(exc.status, {"type": exc.slug, "detail": exc.detail}, method, path)


def _specs(body: RolloutRunRequest, registry: RegistryDep) -> list[EpisodeSpec]:
    entry = registry.get(body.env)
    if body.task_ids is not None:
        task_ids = body.task_ids
        for task_id in task_ids:
            entry.task(task_id)  # 404 now, not one failed episode per unknown id later
    else:
        tasks = entry.dataset.tasks(body.split)
        task_ids = [task.id for task in tasks[: body.limit]]
    if not task_ids:
        raise InvalidRequest(f"no tasks in {body.env!r} split {body.split!r}")
    if len(task_ids) * body.n > 100_000:
        raise InvalidRequest("a run may hold at most 100000 episodes")
    base = body.sampling.seed
    specs = []
    for index, task_id in enumerate(task_ids):
        for k in range(body.n):
            sample_seed = None if base is None else base + index * body.n + k
            specs.append(EpisodeSpec(body.env, task_id, None, body.seed, sample_seed))
    return specs


def _policy(body: RolloutRunRequest) -> tuple[TokenSampler | ChatSampler, Renderer | None]:
    spec = body.policy
    key = spec.api_key.get_secret_value() if spec.api_key else None
    if spec.api == "chat":
        return OpenAIChatSampler(spec.base_url, spec.model, api_key=key, timeout_s=spec.timeout_s), None
    sampler = CompletionsSampler(spec.base_url, spec.model, api_key=key, timeout_s=spec.timeout_s)
    return sampler, RemoteRenderer(spec.base_url, spec.model, api_key=key)


async def _play(
    job: RolloutRun,
    body: RolloutRunRequest,
    specs: list[EpisodeSpec],
    manager: SessionManager,
    slots: asyncio.Semaphore,
    policy_runs: PolicyRuns,
) -> None:
    """Play the run's episodes; the policy's clients are opened here, so a refused run opens none."""
    sampler, renderer = _policy(body)
    config = DriverConfig(
        max_completion_tokens=body.max_completion_tokens,
        max_turns=body.max_turns,
        sampling=SamplingParams(
            max_tokens=body.sampling.max_tokens,
            temperature=body.sampling.temperature,
            top_p=body.sampling.top_p,
            seed=body.sampling.seed,
        ),
        run=job.run,
        for_training=False,
        metadata={"rollout_run": job.id},
    )
    backend = ManagerBackend(manager, slots)

    def keep(_: int, rollout: Rollout) -> None:
        job.rollouts.append(rollout)

    async def admit(group: list[EpisodeSpec]) -> str:
        env, task_id = group[0].env, group[0].task_id
        return await admit_when_room(
            policy_runs, job.tenant, job.run, size=len(group), env=env, task_id=task_id
        )

    async def play(group_id: str, group: list[EpisodeSpec]) -> None:
        grouped = replace(config, metadata={**config.metadata, BUFFER_GROUP_KEY: group_id})
        await RolloutDriver(backend, sampler, renderer, grouped).run_many(group, len(group), on_episode=keep)

    try:
        if body.buffer:  # each task's n episodes (consecutive in `specs`) are one group
            groups = [specs[at : at + body.n] for at in range(0, len(specs), body.n)]
            await play_groups(groups, admit, play, at_once=max(1, job.concurrency // body.n))
        else:
            await RolloutDriver(backend, sampler, renderer, config).run_many(
                specs, job.concurrency, on_episode=keep
            )
    finally:
        await backend.aclose()
        await sampler.aclose()
        if isinstance(renderer, RemoteRenderer):
            await renderer.aclose()


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    summary="Run episodes against a policy URL and store them",
    responses={
        200: {"description": "the finished run (wait: true)"},
        404: {"description": "unknown env or task"},
        422: {"description": "malformed request, or a policy URL the operator does not allow"},
        429: {"description": "as many runs are playing as the server allows (Retry-After)"},
    },
)
async def start_rollouts(
    body: RolloutRunRequest,
    manager: ManagerDep,
    registry: RegistryDep,
    runs: RunBoardDep,
    tenant: TenantDep,
    policy_runs: PolicyRunsDep,
) -> Response:
    # Before anything else: a refused endpoint is never connected to, not even to fail.
    refused = refusal(body.policy.base_url, runs.settings.policy_urls, "GYM_ROLLOUT_RUNS__POLICY_URLS")
    if refused is not None:
        raise EndpointNotAllowed(refused)
    if body.buffer and body.run is not None:
        await policy_runs.state(tenant, body.run)  # 404 now for a run never announced
    # In a thread: naming up to 10,000 tasks of a generated dataset generates each (CPU work).
    specs = await asyncio.to_thread(_specs, body, registry)
    run_id = uuid.uuid4().hex
    job = RolloutRun(
        id=run_id,
        run=body.run or f"rollouts-{run_id[:12]}",
        episodes=len(specs),
        concurrency=min(body.concurrency, runs.settings.max_concurrency),
        tenant=tenant or DEFAULT_TENANT,
    )
    play = partial(_play, body=body, specs=specs, manager=manager, slots=runs.session_slots)
    task = runs.start(job, partial(play, policy_runs=policy_runs))
    if body.wait:
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.cancelled():
                raise  # this request was cancelled (its client left); the run plays on
        return Response(jsontext.dumps(job.view()), status_code=200, media_type="application/json")
    return Response(jsontext.dumps(job.view()), status_code=202, media_type="application/json")


@router.get(
    "/runs/{run_id}",
    summary="Progress and summary of a server-driven run",
    responses={404: {"description": "unknown or forgotten run (runs live in the process that started them)"}},
)
async def get_rollout_run(run_id: str, runs: RunBoardDep, tenant: TenantDep) -> dict[str, Any]:
    view = runs.view(run_id, tenant)
    if view is None:
        raise NotFoundError(
            f"no rollout run {run_id!r} in this process: it never started here, or it finished before the "
            f"newest {runs.settings.keep_finished} finished runs; its episodes are stored, find them with "
            "GET /v1/rollouts?run=NAME"
        )
    return view
