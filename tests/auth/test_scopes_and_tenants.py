"""Keys, scopes and tenants over the HTTP API, on SQLite and PostgreSQL (tests/conftest.py's
`database_url`): what each scope may do, that a tenant never sees another's sessions or rollouts (404,
by id and by listing, through the native API and the MCP, OpenEnv and NeMo Gym facades), 401 for no, a
malformed, an unknown or a revoked key, and how fast a revocation takes effect."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from authtest import REFRESH_S, KeyMaker, bearer, reloaded_twice
from conftest import make_settings
from gymtest import assert_problem, call, solve_counter, wait_for_rollout
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from gym_server.app import create_app

SESSION = {"env": "counter", "task_id": "counter-0000", "seed": 0}


async def test_every_request_without_a_valid_key_is_401_with_a_bearer_challenge(
    secured: Callable[..., Any], keys: KeyMaker, tenant: Callable[[], str]
) -> None:
    key = keys.create(tenant(), "admin")
    unknown = "gym_" + "0" * 12 + "_" + "A" * 43
    wrong_secret = key[:-1] + ("A" if key[-1] != "A" else "B")
    async with secured() as gym:
        for headers in (
            {},
            bearer("nonsense"),
            bearer(unknown),
            bearer(wrong_secret),
            {"Authorization": key},
        ):
            for method, path in (
                ("POST", "/v1/sessions"),  # the fast path's route
                ("GET", "/v1/rollouts"),
                ("GET", "/v1/environments"),
                ("GET", "/metrics"),
                ("POST", "/v1/environments/counter/openenv/reset"),
            ):
                response = await gym.client.request(method, path, headers=headers, json=SESSION)
                assert_problem(response, 401, "valid API key is required")
                assert response.headers["www-authenticate"].startswith("Bearer")
        # The probes and the docs stay public.
        assert (await gym.client.get("/healthz")).status_code == 200
        assert (await gym.client.get("/readyz")).status_code == 200
        assert (await gym.client.get("/openapi.json")).status_code == 200
        assert (await gym.client.get("/v1/environments", headers=bearer(key))).status_code == 200


async def test_each_scope_allows_its_routes_and_admin_implies_the_others(
    secured: Callable[..., Any], keys: KeyMaker, tenant: Callable[[], str]
) -> None:
    name = tenant()
    episodes, read, admin = (keys.create(name, scope) for scope in ("episodes", "read", "admin"))
    async with secured() as gym:
        client = gym.client
        # episodes: play an episode (native fast path), but no reading of stored rollouts or metrics.
        created = await client.post("/v1/sessions", json=SESSION, headers=bearer(episodes))
        assert created.status_code == 201, created.text
        session_id = created.json()["session_id"]
        client.headers.update(bearer(episodes))
        await solve_counter(client, session_id)
        assert (await client.delete(f"/v1/sessions/{session_id}")).status_code == 204
        for method, path in (
            ("GET", "/v1/rollouts"),
            ("GET", f"/v1/rollouts/{session_id}"),
            ("GET", "/metrics"),
            ("POST", f"/v1/rollouts/{session_id}/reverify"),
        ):
            assert_problem(await client.request(method, path), 403, "lacks the")
        # read: stored rollouts and metrics, but no new episodes and no re-scoring.
        client.headers.update(bearer(read))
        record = await wait_for_rollout(client, session_id, "completed")
        assert record["tenant"] == name and record["reward"] == 1.0
        assert (await client.get("/metrics")).status_code == 200
        assert_problem(await client.post("/v1/sessions", json=SESSION), 403, "lacks the episodes scope")
        assert_problem(await client.post(f"/v1/rollouts/{session_id}/reverify"), 403, "lacks the admin scope")
        # admin: everything.
        client.headers.update(bearer(admin))
        assert (await client.post(f"/v1/rollouts/{session_id}/reverify")).status_code == 200
        assert (await client.get("/v1/rollouts", params={"run": "x"})).status_code == 200
        assert (await client.post("/v1/sessions", json=SESSION)).status_code == 201


async def test_a_tenant_never_sees_another_tenants_sessions_or_rollouts(
    secured: Callable[..., Any], keys: KeyMaker, tenant: Callable[[], str]
) -> None:
    mine, theirs = tenant(), tenant()
    owner, other = keys.create(mine, "admin"), keys.create(theirs, "admin")
    async with secured() as gym:
        client = gym.client
        live = (await client.post("/v1/sessions", json=SESSION, headers=bearer(owner))).json()["session_id"]
        done = (await client.post("/v1/sessions", json=SESSION, headers=bearer(owner))).json()["session_id"]
        client.headers.update(bearer(owner))
        await solve_counter(client, done)
        await client.delete(f"/v1/sessions/{done}")
        await wait_for_rollout(client, done, "completed")
        reset = await client.post(
            "/v1/environments/counter/openenv/reset", json={"task_id": "counter-0000"}, headers=bearer(owner)
        )
        episode = reset.json()["observation"]["metadata"]["gym-server/episode"]["session_id"]

        client.headers.update(bearer(other))
        # By id: live, closed (a 410 to its owner) and stored sessions all answer 404, as unknown ids do.
        for session_id in (live, done, episode):
            assert_problem(await client.get(f"/v1/sessions/{session_id}"), 404, session_id)
            assert_problem(
                await client.post(f"/v1/sessions/{session_id}/step", json={"message": call("read")}),
                404,
                session_id,
            )
            assert_problem(await client.post(f"/v1/sessions/{session_id}/verify"), 404, session_id)
            assert_problem(await client.delete(f"/v1/sessions/{session_id}"), 404, session_id)
        assert_problem(await client.get(f"/v1/rollouts/{done}"), 404, done)
        assert_problem(await client.post(f"/v1/rollouts/{done}/reverify"), 404, done)
        step = {"episode_id": episode, "action": {"type": "call_tool", "tool_name": "read", "arguments": {}}}
        assert (await client.post("/v1/environments/counter/openenv/step", json=step)).status_code == 404
        state = await client.get("/v1/environments/counter/openenv/state", params={"episode_id": episode})
        assert state.status_code == 404
        # By listing: nothing of the owner's, with or without filters.
        assert (await client.get("/v1/rollouts")).json()["total"] == 0
        assert (await client.get("/v1/rollouts", params={"env": "counter"})).json()["items"] == []

        # The owner still sees and steps all of it.
        client.headers.update(bearer(owner))
        listed = (await client.get("/v1/rollouts")).json()
        assert done in {item["id"] for item in listed["items"]}
        assert {item["tenant"] for item in listed["items"]} == {mine}
        assert (
            await client.post(f"/v1/sessions/{live}/step", json={"message": call("read")})
        ).status_code == 200
        assert (await client.post("/v1/environments/counter/openenv/step", json=step)).status_code == 200
        assert (await client.get(f"/v1/sessions/{done}")).status_code == 200  # stored: its final state


async def test_a_revoked_key_is_refused_within_the_refresh_interval(
    secured: Callable[..., Any], keys: KeyMaker, tenant: Callable[[], str]
) -> None:
    key = keys.create(tenant(), "read")
    async with secured() as gym:
        assert (await gym.client.get("/v1/rollouts", headers=bearer(key))).status_code == 200
        keys.revoke(key)
        await reloaded_twice(gym.app)  # the second reload is the first sure to start after the revocation
        assert_problem(
            await gym.client.get("/v1/rollouts", headers=bearer(key)), 401, "valid API key is required"
        )
        # A key created while the server runs works after a refresh, with no restart.
        fresh = keys.create(tenant(), "read")
        await reloaded_twice(gym.app)
        assert (await gym.client.get("/v1/rollouts", headers=bearer(fresh))).status_code == 200


async def test_with_auth_off_everything_is_open_and_stamped_with_the_default_tenant(
    app_factory: Callable[..., Any],
) -> None:
    async with app_factory(auth={"mode": "off"}) as gym:
        created = await gym.client.post("/v1/sessions", json=SESSION)
        assert created.status_code == 201
        session_id = created.json()["session_id"]
        await gym.client.delete(f"/v1/sessions/{session_id}")
        record = await wait_for_rollout(gym.client, session_id, "abandoned")
        assert record["tenant"] == "default"


async def test_another_tenants_mcp_session_id_is_unknown(
    secured: Callable[..., Any], keys: KeyMaker, tenant: Callable[[], str]
) -> None:
    owner, other = keys.create(tenant(), "episodes"), keys.create(tenant(), "episodes")
    path = "/v1/environments/counter/mcp"
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    }
    async with secured() as gym:
        client = gym.client
        opened = await client.post(path, json=initialize, headers={**headers, **bearer(owner)})
        assert opened.status_code == 200, opened.text
        session = {
            **headers,
            "mcp-session-id": opened.headers["mcp-session-id"],
            "mcp-protocol-version": "2025-11-25",
        }
        await client.post(
            path,
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
            headers={**session, **bearer(owner)},
        )
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        assert (
            await client.post(path, json=listing, headers={**session, **bearer(owner)})
        ).status_code == 200
        stolen = await client.post(path, json=listing, headers={**session, **bearer(other)})
        assert stolen.status_code == 404 and "unknown MCP session" in stolen.text
        closed = await client.delete(path, headers={**session, **bearer(other)})
        assert closed.status_code == 404
        assert (
            await client.post(path, json=listing, headers={**session, **bearer(owner)})
        ).status_code == 200


async def test_another_tenants_nemo_gym_cookie_names_no_episode(
    secured: Callable[..., Any], keys: KeyMaker, tenant: Callable[[], str]
) -> None:
    owner, other = keys.create(tenant(), "episodes"), keys.create(tenant(), "episodes")
    base = "/v1/environments/counter/nemo-gym"
    row = {"responses_create_params": {"input": [{"role": "user", "content": "Bring the counter to 26."}]}}
    async with secured() as gym:
        client = gym.client
        seeded = await client.post(f"{base}/seed_session", json=row, headers=bearer(owner))
        assert seeded.status_code == 200, seeded.text
        client.cookies.clear()
        jar = "; ".join(f"{name}={value}" for name, value in seeded.cookies.items())
        stolen = await client.post(f"{base}/read", json={}, headers={"cookie": jar, **bearer(other)})
        assert stolen.status_code == 404, stolen.text
        client.cookies.clear()
        mine = await client.post(f"{base}/read", json={}, headers={"cookie": jar, **bearer(owner)})
        assert mine.status_code == 200, mine.text


def test_openenv_websocket_needs_an_episodes_key(
    database_url: str, keys: KeyMaker, tenant: Callable[[], str]
) -> None:
    name = tenant()
    episodes, read = keys.create(name, "episodes"), keys.create(name, "read")
    path = "ws://localhost/v1/environments/counter/openenv/ws"
    settings = make_settings(database_url, auth={"mode": "on", "refresh_s": REFRESH_S})
    with TestClient(create_app(settings), base_url="http://localhost") as client:
        for headers in ({}, bearer(read)):
            with (
                pytest.raises(WebSocketDisconnect) as refused,
                client.websocket_connect(path, headers=headers),
            ):
                pass
            assert refused.value.code == 1008
        with client.websocket_connect(path, headers=bearer(episodes)) as ws:
            ws.send_json({"type": "reset", "data": {"task_id": "counter-0000"}})
            answer = ws.receive_json()
            assert answer["type"] == "observation", answer
