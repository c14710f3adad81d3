"""Play a user's own agent as gym episodes: one session with a gateway per run, then its samples and reward.

For each episode: open a session with `gateway` (the gym hands out the episode's OpenAI base URL and MCP
URL), run `await agent(episode)`, end the episode (if the agent did not end it through the environment's
tools, `POST /v1/sessions/{id}/answer` lets the verifier score its last assistant message), close it,
then read the stored row (reward, failure) and `GET /v1/rollouts/{id}/samples` (the token-exact samples).

**No signal.** An episode whose agent raised, ran past its time limit, or whose policy failed (the gateway
stored `policy_error` / `policy_timeout`) gets `reward=None`, never 0: a trainer should give it no
advantage. The agent's exception text is kept in `AgentRollout.error`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gym_trainer.agents.episode import AgentEpisode, AgentFn
from gym_trainer.agents.samples import EpisodeSamples, TokenSample
from gym_trainer.client import GymAPIError, GymClient, GymClientError
from gym_trainer.client.keys import gym_api_key
from gym_trainer.episodes import EpisodeSpec

__all__ = ["AgentRollout", "GatewayConfig", "play_agent", "play_agent_many"]

# Sent as the OpenAI client's api key when the gym needs none: OpenAI clients refuse an empty key.
NO_KEY = "gym-no-key"


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """How episodes are opened for an agent.

    Args:
        upstream: the policy endpoint the gateway forwards to: an allowed base URL or an operator's name
            for one (the same allow-list as server-driven runs; docs/gateway.md).
        model: the model name the agent is told to send; None: the first model the gateway lists.
        token_exact: refuse upstream answers without token ids (training); False for evaluation only.
        run: the gym run the episodes are filed under.
        ttl_s: idle TTL of each session (the gym's default when None).
        agent_timeout_s: wall-clock limit of one agent run; past it the episode is `policy_timeout`.
        weight_version: the policy revision the upstream samples with (a trainer's step), stored with the
            episode (`policy.weight_version`) and on each of its gateway calls.
        metadata: the sessions' metadata (the rollout buffer's `buffer_group`, say).
    """

    upstream: str
    model: str | None = None
    token_exact: bool = True
    run: str | None = None
    ttl_s: float | None = None
    agent_timeout_s: float | None = 600.0
    weight_version: str | None = None
    metadata: dict[str, Any] | None = None


@dataclass(slots=True)
class AgentRollout:
    """One agent episode, ready for a trainer: the gym's verdict and the recorded samples."""

    spec: EpisodeSpec
    session_id: str | None = None
    task_id: str | None = None
    reward: float | None = None
    components: dict[str, float] = field(default_factory=dict)
    failure: str | None = None
    samples: list[TokenSample] = field(default_factory=list)
    token_exact: bool = False
    masked_share: float = 0.0
    num_calls: int = 0
    error: str | None = None
    prompt: list[dict[str, Any]] = field(default_factory=list, repr=False)


def _present(**fields: Any) -> dict[str, Any]:
    return {key: value for key, value in fields.items() if value is not None}


class _AgentRun:
    """One episode: open, run the agent, end, close, collect."""

    def __init__(self, gym: GymClient, agent: AgentFn, spec: EpisodeSpec, config: GatewayConfig) -> None:
        self.gym, self.agent, self.spec, self.config = gym, agent, spec, config
        self.rollout = AgentRollout(spec=spec, task_id=spec.task_id)

    async def play(self, api_key: str | None) -> AgentRollout:
        try:
            episode = await self._open(api_key)
        except GymClientError as exc:
            self.rollout.failure, self.rollout.error = "gym_error", str(exc)[:500]
            return self.rollout
        failure = await self._run_agent(episode)
        try:
            if failure is None:
                await self._finish(episode.session_id)
            await self.gym.close(episode.session_id, failure=failure)
            await self._collect(episode.session_id)
        except GymClientError as exc:
            self.rollout.failure = self.rollout.failure or "gym_error"
            self.rollout.error = self.rollout.error or str(exc)[:500]
            self.rollout.reward = None
        if failure is not None:  # the agent failed: no signal, whatever the row says
            self.rollout.failure, self.rollout.reward = self.rollout.failure or failure, None
        return self.rollout

    async def _open(self, api_key: str | None) -> AgentEpisode:
        gateway = _present(
            upstream=self.config.upstream, model=self.config.model, token_exact=self.config.token_exact
        )
        body = _present(
            env=self.spec.env,
            task_id=self.spec.task_id,
            task=self.spec.task,
            seed=self.spec.seed,
            ttl_s=self.config.ttl_s,
            run=self.config.run,
            metadata=self.config.metadata,
            gateway=gateway,
            policy={
                "kind": "agent",
                "model": self.config.model,
                "upstream": self.config.upstream,
                "weight_version": self.config.weight_version,
            },
        )
        data = (await self.gym.request("POST", "/v1/sessions", json=body)).json()
        urls = data["gateway"]
        self.rollout.session_id, self.rollout.task_id = data["session_id"], data["task_id"]
        self.rollout.prompt = list(data["messages"])
        model = self.config.model or await self._first_model(urls["base_url"])
        return AgentEpisode(
            session_id=data["session_id"],
            env=data["env"],
            task_id=data["task_id"],
            seed=data.get("seed"),
            base_url=urls["base_url"],
            mcp_url=urls["mcp_url"],
            prompt=list(data["messages"]),
            tools=list(data.get("tools") or []),
            model=model,
            api_key=api_key or NO_KEY,
        )

    async def _first_model(self, base_url: str) -> str:
        listed = (await self.gym.request("GET", "", base_url=f"{base_url}/models", idempotent=True)).json()
        return str(listed["data"][0]["id"])

    async def _run_agent(self, episode: AgentEpisode) -> str | None:
        """Run the agent; the client failure class the episode is closed with, or None."""
        try:
            await asyncio.wait_for(self.agent(episode), self.config.agent_timeout_s)
        except TimeoutError:
            self.rollout.error = f"the agent ran past {self.config.agent_timeout_s} s"
            return "policy_timeout"
        except Exception as exc:  # the user's code: any error is this episode's, never the batch's
            self.rollout.error = f"{type(exc).__name__}: {exc}"[:500]
            return "policy_error"
        return None

    async def _finish(self, session_id: str) -> None:
        """End an episode the agent left open: its last assistant message is the answer to score."""
        state = await self.gym.get_session(session_id)
        if state.get("done") or state.get("failure"):
            return
        try:
            await self.gym.request("POST", f"/v1/sessions/{session_id}/answer", json={})
        except GymAPIError as exc:
            # 409: it ended meanwhile; 422: nothing to score (the agent never answered): the row says so.
            if exc.status not in (409, 422):
                raise
            self.rollout.error = exc.detail[:500]

    async def _collect(self, session_id: str) -> None:
        row = await self.gym.wait_for_rollout(session_id)
        self.rollout.reward = row.get("reward")
        self.rollout.components = dict(row.get("components") or {})
        self.rollout.failure = row.get("failure")
        report = EpisodeSamples.model_validate(
            (await self.gym.request("GET", f"/v1/rollouts/{session_id}/samples", idempotent=True)).json()
        )
        self.rollout.samples = list(report.samples)
        self.rollout.token_exact = report.token_exact
        self.rollout.masked_share = report.masked_share
        self.rollout.num_calls = report.num_calls


async def play_agent(
    gym: GymClient,
    agent: AgentFn,
    spec: EpisodeSpec,
    config: GatewayConfig,
    *,
    api_key: str | None = None,
) -> AgentRollout:
    """Play one episode of `spec` with the user's `agent`; never raises for the episode's own failures
    (they are in `failure` and `error`). `api_key`: the gym's key, handed to the agent (default
    `$GYM_API_KEY`)."""
    return await _AgentRun(gym, agent, spec, config).play(gym_api_key(api_key))


async def play_agent_many(
    gym: GymClient,
    agent: AgentFn,
    specs: Sequence[EpisodeSpec],
    config: GatewayConfig,
    *,
    concurrency: int = 16,
    api_key: str | None = None,
) -> list[AgentRollout]:
    """One episode per spec (repeat a spec N times for N runs of a prompt), at most `concurrency` at a
    time; results in the order of `specs`."""
    limit = asyncio.Semaphore(max(1, concurrency))

    async def one(spec: EpisodeSpec) -> AgentRollout:
        async with limit:
            return await play_agent(gym, agent, spec, config, api_key=api_key)

    return list(await asyncio.gather(*(one(spec) for spec in specs)))
