"""ART's real client objects playing gym episodes: `art.Model.openai_client()` against the gym's CPU policy
server (the warmed-up tiny model), `art.Trajectory` / `art.TrajectoryGroup` /
`art.gather_trajectory_groups` collecting them, and ART's own RULER scoring them. ART's training
backends (vLLM + Unsloth or Megatron on a GPU, or its paid serverless service) are not run here."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import art
import httpx
import pytest
import uvicorn
from art.rewards import ruler_score_group
from conftest import Policy
from gym_servers import Gym, free_port
from openai.types.chat.chat_completion import Choice
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gym_trainer.art import (
    GymEpisodeFailed,
    GymRolloutConfig,
    gym_rollout,
    gym_trajectory_groups,
)
from gym_trainer.client import GymClient
from gym_trainer.episodes import EpisodeSpec

CONFIG = GymRolloutConfig(max_turns=4, completion={"max_tokens": 64, "temperature": 1.0}, run="art")


def model_of(policy: Policy) -> art.Model:
    return art.Model(
        name=policy.name, project="gym-interop", inference_api_key="local", inference_base_url=policy.url
    )


def spec_of(policy: Policy, index: int) -> EpisodeSpec:
    task = policy.tasks[index % len(policy.tasks)]  # the warm-up keeps two tasks
    return EpisodeSpec("counter", task=task["task"], seed=task["seed"])


def test_groups_of_counter_episodes_are_art_trajectories_scored_by_the_gym(gym: Gym, policy: Policy) -> None:
    """Two groups of three episodes gathered by ART: every trajectory holds the session's opening, the
    model's `Choice`s verbatim (ids and logprobs one to one, stored by the gym too) and the gym's
    replies; its reward is the stored trajectory's."""
    model = model_of(policy)

    async def gather() -> list[art.TrajectoryGroup]:
        async with GymClient(gym.url) as client:
            return await gym_trajectory_groups(
                model, client, [spec_of(policy, 0), spec_of(policy, 1)], 3, CONFIG
            )

    groups = asyncio.run(gather())
    assert [len(group) for group in groups] == [3, 3] and not any(group.exceptions for group in groups)
    multi_turn = finished = 0
    for group in groups:
        for trajectory in group:
            assert isinstance(trajectory, art.Trajectory) and trajectory.metadata["gym_failure"] is None
            # The warmed model usually submits within the 4 turns, not always (temperature 1): an episode
            # it did not end is closed by the adapter, stored abandoned, and scored all the same.
            stop_reason = trajectory.metadata["gym_stop_reason"]
            assert stop_reason in ("done", "max_turns")
            status = "completed" if stop_reason == "done" else "abandoned"
            stored = gym.stored(str(trajectory.metadata["gym_session_id"]), status)
            assert trajectory.reward == stored["reward"]
            finished += stop_reason == "done"
            assert trajectory.metrics["gym_turns"] == stored["num_turns"]
            assert stored["policy"] == {"kind": "art", "model": policy.name}

            # The stored transcript, with each assistant message replaced by the model's Choice.
            items = trajectory.messages_and_choices
            choices = [item for item in items if isinstance(item, Choice)]
            assert len(items) == len(stored["messages"]) and len(choices) == stored["num_turns"]
            for item, message in zip(items, stored["messages"], strict=True):
                if isinstance(item, Choice):
                    assert message["role"] == "assistant"
                    calls = [
                        (c.function.name, json.loads(c.function.arguments))
                        for c in item.message.tool_calls or []
                    ]
                    stored_calls = [
                        (c["function"]["name"], json.loads(c["function"]["arguments"]))
                        for c in message.get("tool_calls") or []
                    ]
                    assert calls == stored_calls
                else:
                    assert item == message
            # ART's own view of the trajectory is the stored transcript.
            assert [m["role"] for m in trajectory.messages()] == [m["role"] for m in stored["messages"]]

            # Tokens: the server's ids for each choice, one logprob each, as the gym stored them.
            for choice, turn in zip(choices, stored["turns"], strict=True):
                ids = choice.model_extra["token_ids"]
                assert len(choice.logprobs.content) == len(ids) > 0
                assert turn["completion_ids"] == ids
                assert turn["logprobs"] == pytest.approx([entry.logprob for entry in choice.logprobs.content])
            multi_turn += len(choices) > 1
    assert multi_turn >= 1  # the warmed-up model calls add, reads the reply, then submits
    assert finished >= 1  # and ends an episode itself


class KillOnStep(httpx.AsyncBaseTransport):
    """The gym client's transport: the gym process is killed just before the `kill_at`-th step request,
    which then finds nobody listening."""

    def __init__(self, gym: Gym, kill_at: int) -> None:
        self.gym, self.kill_at, self.steps = gym, kill_at, 0
        self.inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/step"):
            self.steps += 1
            if self.steps == self.kill_at:
                self.gym.process.kill()
                self.gym.process.wait()
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def test_a_gym_killed_mid_episode_is_no_signal_and_the_batch_goes_on(
    gym: Gym, gym_with: Callable[..., Gym], policy: Policy
) -> None:
    """One episode's gym dies at its first step (the policy samples at temperature 1, and an unparseable
    first turn can end an episode before any second step): ART records a `GymEpisodeFailed` in the
    group's exceptions (no trajectory, so no reward, never 0); the episode beside it is a scored one."""
    doomed = gym_with()
    model = model_of(policy)

    async def batch() -> list[art.TrajectoryGroup]:
        async with (
            GymClient(doomed.url, transport=KillOnStep(doomed, 1)) as dying,
            GymClient(gym.url) as healthy,
        ):
            spec = spec_of(policy, 2)
            group = art.TrajectoryGroup(
                [gym_rollout(model, dying, spec, CONFIG), gym_rollout(model, healthy, spec, CONFIG)]
            )
            return await art.gather_trajectory_groups([group], max_exceptions=1, pbar_desc=None)

    [group] = asyncio.run(batch())
    [failed] = group.exceptions
    assert "GymEpisodeFailed" in failed.type and failed.message.startswith("gym_error:")
    [scored] = group.trajectories
    assert scored.reward == gym.stored(str(scored.metadata["gym_session_id"]), "completed")["reward"]


def test_a_failed_episode_carries_its_partial_trajectory(policy: Policy) -> None:
    """Raised outside a group, the failure says why and keeps what was played, with no reward set."""
    model = model_of(policy)

    async def play() -> None:
        async with GymClient(f"http://127.0.0.1:{free_port()}") as nowhere:
            await gym_rollout(model, nowhere, spec_of(policy, 0), CONFIG)

    with pytest.raises(GymEpisodeFailed) as raised:
        asyncio.run(play())
    assert raised.value.failure == "gym_error"
    assert raised.value.trajectory.metadata["gym_failure"] == "gym_error"
    assert "connect" in raised.value.error.lower()


@contextmanager
def scripted_judge(scores: list[float]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """An OpenAI-compatible judge that answers RULER's request with `scores` in RULER's JSON shape (a
    stand-in for a capable judge model, which a CPU cannot run); yields its URL and the requests."""
    seen: list[dict[str, Any]] = []

    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        seen.append(body)
        content = {
            "scores": [
                {"trajectory_id": str(i + 1), "explanation": "scripted", "score": s}
                for i, s in enumerate(scores)
            ]
        }
        message = {"role": "assistant", "content": json.dumps(content)}
        return JSONResponse(
            {
                "id": "judge",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        )

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])]),
            port=port,
            log_level="error",
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        threading.Event().wait(0.02)
    try:
        yield f"http://127.0.0.1:{port}/v1", seen
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def one_group(gym: Gym, policy: Policy) -> art.TrajectoryGroup:
    async def gather() -> art.TrajectoryGroup:
        async with GymClient(gym.url) as client:
            [group] = await gym_trajectory_groups(
                model_of(policy), client, [spec_of(policy, 3)], 2, CONFIG, pbar_desc=None
            )
            return group

    return asyncio.run(gather())


def test_ruler_scores_gym_trajectories_with_a_judge(gym: Gym, policy: Policy) -> None:
    """ART's `ruler_score_group` on the adapter's trajectories: the judge sees the episodes (the gym's
    tool replies in them), its scores become the rewards, the gym's reward stays as `independent_reward`.
    Groups are gathered until one holds a tool reply (at most 4): the tiny policy, sampling at temperature
    1, writes a malformed call now and then, and a group without a reply checks nothing of them."""
    for _ in range(4):
        group = one_group(gym, policy)
        if any(m["role"] == "tool" for t in group for m in t.messages()):
            break
    with scripted_judge([0.25, 0.75]) as (url, seen):
        judged = asyncio.run(ruler_score_group(group, "openai/judge", {"api_base": url, "api_key": "local"}))
    assert judged is not None
    assert [t.reward for t in judged] == [0.25, 0.75]
    assert [t.metrics["independent_reward"] for t in judged] == [t.reward for t in group]
    [request] = seen
    prompt = request["messages"][1]["content"]
    assert '<trajectory id="1">' in prompt and '<trajectory id="2">' in prompt
    tool_replies = [m["content"] for t in group for m in t.messages() if m["role"] == "tool"]
    assert tool_replies and all(json.dumps(reply)[1:-1] in prompt for reply in tool_replies)


def test_ruler_with_the_gyms_policy_server_as_the_judge(gym: Gym, policy: Policy) -> None:
    """The CPU policy server as RULER's judge over litellm: the request goes round trip, and the tiny
    model's reply, which is not RULER's JSON, is refused by RULER (raised, or `None` when swallowed);
    never a made-up score."""
    group = one_group(gym, policy)
    params = {"api_base": policy.url, "api_key": "local", "max_tokens": 16}
    with pytest.raises(Exception, match=r"(?i)json"):
        asyncio.run(ruler_score_group(group, f"openai/{policy.name}", params))
    assert (
        asyncio.run(ruler_score_group(group, f"openai/{policy.name}", params, swallow_exceptions=True))
        is None
    )
