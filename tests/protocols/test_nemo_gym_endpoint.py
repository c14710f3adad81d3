"""The NeMo Gym resources-server facade in process, spoken to as NeMo Gym's agents speak to a resources
server: JSON bodies, the session cookie carried from each answer to the next call.

NeMo Gym's own client code drives a real server in tests/interop/nemo-gym (`make interop
PEER=nemo-gym`); these check the gym's side on the ASGI app: episodes seeded, stepped, scored, refused,
expired and stored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import AppHarness, serving
from gymtest import wait_for_rollout

from gym_server.protocols.nemo_gym import wire

COUNTER = "/v1/environments/counter/nemo-gym"
ROW = {"responses_create_params": {"input": [{"role": "user", "content": "Bring the counter to 26."}]}}


def cookie(cookies: dict[str, str]) -> dict[str, str]:
    """A `Cookie` header (httpx deprecates per-request cookies)."""
    return {"cookie": "; ".join(f"{name}={value}" for name, value in cookies.items())} if cookies else {}


class Rollout:
    """One NeMo Gym rollout's calls, carrying the cookies of each answer to the next call (as the
    simple agent does: `cookies = response.cookies`)."""

    def __init__(self, client: httpx.AsyncClient, base: str = COUNTER) -> None:
        self.client, self.base = client, base
        self.cookies: dict[str, str] = {}
        self.session_id = ""

    async def post(self, route: str, body: Any) -> httpx.Response:
        self.client.cookies.clear()  # only what the last answer set travels, nothing the client kept
        response = await self.client.post(f"{self.base}/{route}", json=body, headers=cookie(self.cookies))
        self.cookies = dict(response.cookies)
        return response

    async def seed(self, **row: Any) -> dict[str, Any]:
        response = await self.post("seed_session", {**ROW, **row})
        assert response.status_code == 200, response.text
        self.session_id = response.json()["session_id"]
        assert self.cookies == {wire.COOKIE: self.session_id}
        return dict(response.json())


@pytest.fixture
async def gym(tmp_path: Path) -> Any:
    async with serving(tmp_path, sessions={"max_sessions": 2}) as harness:
        yield harness


async def test_an_episode_is_played_and_scored_and_stored_like_a_native_one(gym: AppHarness) -> None:
    rollout = Rollout(gym.client)
    opening = await rollout.seed(task_id="counter-0000", seed=0, run="nemo-run-1")
    assert (opening["env"], opening["task_id"], opening["seed"]) == ("counter", "counter-0000", 0)
    assert "Bring the counter to 26" in opening["messages"][-1]["content"]
    assert [tool["function"]["name"] for tool in opening["tools"]] == ["read", "add", "submit"]

    read = await rollout.post("read", {})
    assert (read.status_code, read.json(), read.headers["x-gym-done"]) == (200, 20, "false")
    added = await rollout.post("add", {"amount": 6})
    assert added.json() == 26
    submitted = await rollout.post("submit", {})
    assert submitted.json() == "submitted 26"
    assert (submitted.headers["x-gym-done"], submitted.headers["x-gym-reward"]) == ("true", "1.0")
    assert rollout.cookies == {wire.COOKIE: rollout.session_id}  # still carried: verify needs it

    request = {**ROW, "response": {"output": [{"type": "message", "role": "assistant", "content": "done"}]}}
    verified = await rollout.post("verify", request)
    assert verified.status_code == 200, verified.text
    answer = verified.json()
    assert answer["reward"] == 1.0 and answer["reward_components"] == {"reached": 1.0, "submitted": 1.0}
    assert answer["responses_create_params"] == ROW["responses_create_params"]
    assert answer["response"] == request["response"] and answer["gym_session_id"] == rollout.session_id

    # Verify closed the episode: committed before its 200, so the row is there at once.
    stored = (await gym.client.get(f"/v1/rollouts/{rollout.session_id}")).json()
    assert (stored["status"], stored["reward"], stored["num_turns"]) == ("completed", 1.0, 3)
    assert stored["metadata"] == {"protocol": "nemo-gym"} and stored["env_version"] == opening["env_version"]
    assert (stored["run"], stored["task_id"], stored["seed"]) == ("nemo-run-1", "counter-0000", 0)
    calls = [m["tool_calls"][0]["function"] for m in stored["messages"] if m["role"] == "assistant"]
    assert calls == [
        {"name": "read", "arguments": "{}"},
        {"name": "add", "arguments": '{"amount":6}'},
        {"name": "submit", "arguments": "{}"},
    ]
    assert "done" not in str(stored["messages"])  # the episode was over: the final text was not stepped
    assert rollout.cookies == {}  # the episode is over: no cookie is set again
    old_cookie = cookie({wire.COOKIE: rollout.session_id})
    gone = await gym.client.post(f"{COUNTER}/read", json={}, headers=old_cookie)
    assert gone.status_code == 410 and "was closed" in gone.json()["detail"]


async def test_bad_calls_answer_in_nemo_gyms_error_form_and_the_episode_goes_on(gym: AppHarness) -> None:
    rollout = Rollout(gym.client)
    await rollout.seed(task_id="counter-0000", seed=0)
    bad = await rollout.post("add", {"amount": "six"})
    assert bad.status_code == 422 and "invalid arguments for 'add'" in bad.json()["detail"]
    out_of_range = await rollout.post("add", {"amount": 60})
    assert out_of_range.status_code == 422 and "between -10 and 10" in out_of_range.json()["detail"]
    not_an_object = await rollout.post("add", [6])
    assert not_an_object.status_code == 422 and "must be a JSON object" in not_an_object.json()["detail"]
    unknown = await rollout.post("subtract", {"amount": 1})
    assert unknown.status_code == 404
    assert unknown.json() == {"detail": "unknown tool 'subtract'; this episode's tools: read, add, submit"}
    # Every answer, errors too, set the cookie again, so the episode went on.
    assert rollout.cookies == {wire.COOKIE: rollout.session_id}
    assert (await rollout.post("add", {"amount": 6})).json() == 26
    await rollout.post("submit", {})
    finished = await rollout.post("read", {})
    assert finished.status_code == 409 and "finished" in finished.json()["detail"]
    assert rollout.cookies == {wire.COOKIE: rollout.session_id}

    state = (await gym.client.get(f"/v1/sessions/{rollout.session_id}")).json()
    # The failed calls are steps, stored as natively; the unknown tools never reached the environment.
    assert state["turns"] == 5
    workplace = "/v1/environments/workplace/nemo-gym/verify"
    wrong = await gym.client.post(workplace, headers=cookie(rollout.cookies), json={})
    assert wrong.status_code == 404 and "detail" in wrong.json()


async def test_calls_without_an_episode_are_refused_in_nemo_gyms_form(gym: AppHarness) -> None:
    missing = await gym.client.post(f"{COUNTER}/read", json={})
    assert missing.status_code == 400 and "seed_session first" in missing.json()["detail"]
    unknown = await gym.client.post(f"{COUNTER}/verify", json={}, headers=cookie({wire.COOKIE: "0" * 32}))
    assert unknown.status_code == 404 and list(unknown.json()) == ["detail"]
    no_env = await gym.client.post("/v1/environments/nope/nemo-gym/seed_session", json={})
    assert no_env.status_code == 404 and "nope" in no_env.json()["detail"]
    bad_seed = await gym.client.post(f"{COUNTER}/seed_session", json={"seed": -1})
    assert bad_seed.status_code == 422 and "seed" in bad_seed.json()["detail"]
    not_json = await gym.client.post(
        f"{COUNTER}/seed_session", content=b"{", headers={"content-type": "application/json"}
    )
    assert not_json.status_code == 422 and "not valid JSON" in not_json.json()["detail"]
    no_task = await gym.client.post(f"{COUNTER}/seed_session", json={"task_id": "counter-9999"})
    assert no_task.status_code == 404 and "counter-9999" in no_task.json()["detail"]
    wrong_method = await gym.client.delete(f"{COUNTER}/read")
    assert wrong_method.status_code == 405 and wrong_method.json() == {"detail": "Method Not Allowed"}
    assert gym.app.state.manager.live_count == 0


async def test_an_environment_whose_name_holds_a_slash_is_served(gym: AppHarness) -> None:
    rollout = Rollout(gym.client, "/v1/environments/reasoning_gym/chain_sum/nemo-gym")
    opening = await rollout.seed(seed=1)
    assert opening["env"] == "reasoning_gym/chain_sum"
    verified = await rollout.post("verify", {**ROW, "response": {"output": []}})
    assert verified.status_code == 200 and verified.json()["reward"] == 0.0


async def test_the_seed_draws_the_task_as_a_native_create_does(gym: AppHarness) -> None:
    opening = await Rollout(gym.client).seed(seed=7, split="validation", extra_row_field=[1, 2])
    native = await gym.client.post("/v1/sessions", json={"env": "counter", "seed": 7, "split": "validation"})
    assert native.status_code == 201 and opening["task_id"] == native.json()["task_id"]


async def test_at_capacity_seed_session_is_refused_with_429_and_retry_after(gym: AppHarness) -> None:
    first = Rollout(gym.client)
    await first.seed()
    await gym.client.post("/v1/sessions", json={"env": "counter"})  # native and NeMo Gym count together
    refused = await gym.client.post(f"{COUNTER}/seed_session", json=ROW)
    assert refused.status_code == 429 and refused.headers["retry-after"] == "2"
    assert "maximum of 2 live sessions" in refused.json()["detail"] and "set-cookie" not in refused.headers
    assert (await first.post("read", {})).status_code == 200  # the open episode is untouched


async def test_a_final_answer_in_the_response_is_the_episodes_last_turn(gym: AppHarness) -> None:
    rollout = Rollout(gym.client, "/v1/environments/math/nemo-gym")
    answer = "\\boxed{1518}"
    opening = await rollout.seed(task_id="math-00400")
    assert opening["tools"] == []
    output = [
        {"type": "reasoning", "summary": []},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": answer}]},
    ]
    verified = await rollout.post("verify", {**ROW, "response": {"output": output}})
    assert verified.status_code == 200 and verified.json()["reward"] == 1.0
    stored = (await gym.client.get(f"/v1/rollouts/{rollout.session_id}")).json()
    assert (stored["status"], stored["reward"], stored["done_reason"]) == ("completed", 1.0, "answered")
    assert stored["messages"][-1] == {"role": "assistant", "content": "\\boxed{1518}"}


async def test_a_verify_without_a_final_answer_scores_the_state_and_stores_it(gym: AppHarness) -> None:
    rollout = Rollout(gym.client)
    await rollout.seed(task_id="counter-0000", seed=0)
    await rollout.post("add", {"amount": 6})
    verified = await rollout.post("verify", {**ROW, "response": {"output": []}})
    assert verified.json()["reward"] == 1.0 and verified.json()["reward_components"]["submitted"] == 0.0
    stored = (await gym.client.get(f"/v1/rollouts/{rollout.session_id}")).json()
    assert (stored["status"], stored["reward"]) == ("abandoned", 1.0)


async def test_an_episode_left_without_verify_is_stored_when_its_ttl_runs_out(tmp_path: Path) -> None:
    async with serving(tmp_path, sessions={"default_ttl_s": 0.3, "reap_interval_s": 0.05}) as gym:
        rollout = Rollout(gym.client)
        await rollout.seed()
        await rollout.post("read", {})
        stored = await wait_for_rollout(gym.client, rollout.session_id, "expired")
        assert stored["num_turns"] == 1 and stored["metadata"] == {"protocol": "nemo-gym"}
        late = await rollout.post("read", {})
        assert late.status_code == 410 and rollout.cookies == {}


async def test_a_seed_the_store_could_not_keep_is_422_and_starts_nothing(gym: AppHarness) -> None:
    # A tool route's body is the call's arguments text, stored as text; a seed's body is parsed, and
    # what the store could not keep as sent is refused before a session starts.
    headers = {"content-type": "application/json"}
    for raw, needle in (
        (b'{"run": "half \\ud800"}', "surrogate"),
        (b'{"seed": 1, "extra": 1e400}', "double"),
        (b'{"seed": 1, "extra": ' + b"[" * 250 + b"]" * 250 + b"}", "nested deeper"),
        (b'{"seed": 1, "run": "' + b"r" * 256 + b'"}', "255"),
    ):
        response = await gym.client.post(f"{COUNTER}/seed_session", content=raw, headers=headers)
        assert response.status_code == 422 and needle in response.json()["detail"], response.text
    assert gym.app.state.manager.live_count == 0


USAGE = {"total_tokens": 7}


async def test_aggregate_metrics_are_nemo_gyms_base_statistics_and_need_no_episode(gym: AppHarness) -> None:
    answers = [
        {"_ng_task_index": 0, "_ng_rollout_index": 0, "reward": 1.0, "solved": True},
        {"_ng_task_index": 0, "_ng_rollout_index": 1, "reward": 0.0, "solved": False},
        {
            "_ng_task_index": 1,
            "_ng_rollout_index": 0,
            "reward": 0.5,
            "response": {"usage": {"total_tokens": 7}},
        },
    ]
    url = f"{COUNTER}/aggregate_metrics"
    response = await gym.client.post(url, json={"verify_responses": answers})
    assert response.status_code == 200, response.text
    metrics = response.json()
    assert metrics["key_metrics"] == {"mean/reward": 0.5, "mean/solved": 0.5, "mean/total_tokens": 7.0}
    agent = metrics["agent_metrics"]
    assert (agent["max/reward"], agent["min/reward"], agent["median/reward"]) == (1.0, 0.0, 0.5)
    assert agent["std/reward"] == pytest.approx(0.5)
    first, second = metrics["group_level_metrics"]
    assert (first["_ng_task_index"], first["num_rollouts"], first["mean/reward"]) == (0, 2, 0.5)
    assert [info["rollout_id"] for info in first["rollout_infos"]] == ["0:0", "0:1"]
    # One rollout: no deviation anywhere, so NeMo Gym reads it as 0 for the columns it always has.
    assert second["std/reward"] == 0.0 and second["std/total_tokens"] == 0.0 and "mean/solved" not in second
    assert gym.app.state.manager.live_count == 0
    empty = await gym.client.post(url, json={"verify_responses": []})
    assert empty.json() == {"group_level_metrics": [], "agent_metrics": {}, "key_metrics": {}}
    twice = await gym.client.post(url, json={"verify_responses": [answers[0], answers[0]]})
    assert twice.status_code == 422 and "_ng_task_index=0" in twice.json()["detail"]
    missing = await gym.client.post(url, json={"verify": []})
    assert missing.status_code == 422 and "verify_responses" in missing.json()["detail"]
    unknown = await gym.client.post(
        "/v1/environments/nope/nemo-gym/aggregate_metrics", json={"verify_responses": []}
    )
    assert unknown.status_code == 404


async def test_a_call_that_ends_the_episode_without_a_reply_is_a_success(gym: AppHarness) -> None:
    rollout = Rollout(gym.client, "/v1/environments/tool_call/nemo-gym")
    await rollout.seed(task_id="tool_call-00001")
    done = await rollout.post("list_events", {"date": "2025-03-29"})  # scored, never run: no reply
    assert done.status_code == 200 and done.json() == ""
    assert (done.headers["x-gym-done"], done.headers["x-gym-reward"]) == ("true", "1.0")
