"""What NeMo Gym 0.4.0's own agent and client expect of a resources server, against the gym's facade.

- `/aggregate_metrics`: its base resources server registers it, its `SimpleAgent` proxies it there and
  its rollout collection calls it after every run. The gym's answer (to the agent's proxy and to
  `ServerClient` directly) validates as NeMo Gym's `AggregateMetrics` and equals what NeMo Gym's own
  `compute_aggregate_metrics` (the base server's) computes from the same verify answers.
- A tool call that ends the episode without a reply (the `tool_call` environment scores the call and
  never runs it) is a success: 200, as a working NeMo Gym tool answers.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from conftest import Gym, NemoServers
from nemo_gym.config_types import AggregateMetrics, AggregateMetricsRequest
from nemo_gym.reward_profile import compute_aggregate_metrics
from nemo_gym.server_utils import get_response_json, raise_for_status
from nemo_servers import AGENT, RESOURCES, global_config, server_client
from test_nemo_gym_client import ROW, Resources, nemo_http

pytestmark = pytest.mark.anyio

__all__ = ["nemo_http"]  # the fixture, imported for these tests


def same(ours: Any, theirs: Any) -> bool:
    """Equal as JSON, floats to 1e-12 (NeMo Gym's pandas sums in another order)."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return ours.keys() == theirs.keys() and all(same(ours[key], theirs[key]) for key in ours)
    if isinstance(ours, list) and isinstance(theirs, list):
        return len(ours) == len(theirs) and all(same(a, b) for a, b in zip(ours, theirs, strict=True))
    if isinstance(ours, int | float) and isinstance(theirs, int | float):
        return math.isclose(ours, theirs, rel_tol=1e-12, abs_tol=1e-12)
    return bool(ours == theirs)


async def test_aggregate_metrics_are_nemo_gyms_own_through_its_agent_and_client(
    gym: Gym, nemo_servers: NemoServers, nemo_http: None
) -> None:
    client = server_client(
        global_config(gym.url, "counter", nemo_servers.agent_port, nemo_servers.policy_port)
    )
    answers = []
    for task, seed in ((0, 0), (0, 1), (1, 2)):  # two rollouts of one task, one of another
        response = await client.post(AGENT, "/run", json={**ROW, "seed": seed})
        await raise_for_status(response)
        result = await get_response_json(response)
        # What rollout collection sends: the answer without `response` but its usage, with the indexes.
        usage = (result.get("response") or {}).get("usage")
        kept = {k: v for k, v in result.items() if k not in ("response", "responses_create_params")}
        answers.append(
            {
                **kept,
                **({"response": {"usage": usage}} if usage else {}),
                "_ng_task_index": task,
                "_ng_rollout_index": seed,
            }
        )
    request = AggregateMetricsRequest(verify_responses=answers)
    theirs = compute_aggregate_metrics(answers).model_dump()

    for server in (AGENT, RESOURCES):  # the agent proxies to the gym; the client asks the gym itself
        response = await client.post(server, "/aggregate_metrics", json=request)
        await raise_for_status(response)
        ours = AggregateMetrics.model_validate(await get_response_json(response)).model_dump()
        assert same(ours, theirs), (ours, theirs)
    assert ours["key_metrics"]["mean/reward"] == 1.0 and len(ours["group_level_metrics"]) == 2

    empty = await client.post(RESOURCES, "/aggregate_metrics", json={"verify_responses": []})
    assert AggregateMetrics.model_validate(await get_response_json(empty)) == AggregateMetrics()


async def test_a_call_that_ends_the_episode_without_a_reply_is_a_success(gym: Gym, nemo_http: None) -> None:
    resources = Resources(gym, "tool_call")
    status, opening = await resources.json("seed_session", {"task_id": "tool_call-00001"})
    assert status == 200
    answer = await resources.post("list_events", {"date": "2025-03-29"})
    await raise_for_status(answer)  # 200: no error raised
    assert await get_response_json(answer) == ""
    assert (answer.headers["x-gym-done"], answer.headers["x-gym-reward"]) == ("true", "1.0")
    status, verified = await resources.json("verify", {"responses_create_params": {"input": []}})
    assert status == 200 and verified["reward"] == 1.0
    assert gym.stored(opening["session_id"], "completed")["reward"] == 1.0
