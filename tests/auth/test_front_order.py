"""The order of the front's checks on a server with keys on: the host guard before the key, the key
before the body's media type and size, so a request is refused for the first thing wrong with it and
nothing after a refusal runs (a stranger never learns what the server thinks of its body)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from authtest import KeyMaker, bearer
from gymtest import assert_problem

SESSION = {"env": "counter", "task_id": "counter-0000", "seed": 0}
STEP = {"message": {"role": "assistant", "content": "hi"}}


async def test_each_request_is_refused_for_the_first_check_it_fails(
    secured: Callable[..., Any], keys: KeyMaker, tenant: Callable[[], str]
) -> None:
    key = bearer(keys.create(tenant(), "admin"))
    async with secured() as gym:
        limit = gym.app.state.settings.limits.max_body_bytes
        post = gym.client.post
        # a foreign Host: 421, with or without a key
        for headers in ({}, key):
            answer = await post("/v1/sessions", json=SESSION, headers={**headers, "Host": "attacker.example"})
            assert_problem(answer, 421, "does not answer for the host")
        # no key: 401, whatever the body
        plain = {"Content-Type": "text/plain"}
        assert (await post("/v1/sessions", content=b"x", headers=plain)).status_code == 401
        oversized = {"Content-Type": "application/json", "Content-Length": str(limit + 1)}
        assert (await post("/v1/sessions", content=b"{}", headers=oversized)).status_code == 401
        # with a key: the body's media type, then its size
        assert_problem(await post("/v1/sessions", content=b"x", headers={**key, **plain}), 415, "text/plain")
        json_type = {"Content-Type": "application/json"}
        too_large = b"[" + b"0," * (limit // 2) + b"0]"
        assert_problem(
            await post("/v1/sessions", content=too_large, headers={**key, **json_type}), 413, "over the limit"
        )
        # and through every check, the episode's fast path as the key's tenant
        created = await post("/v1/sessions", json=SESSION, headers=key)
        assert created.status_code == 201
        session_id = created.json()["session_id"]
        stepped = await post(f"/v1/sessions/{session_id}/step", json=STEP, headers=key)
        assert stepped.status_code == 200
        assert (await gym.client.delete(f"/v1/sessions/{session_id}", headers=key)).status_code == 204
        assert (await gym.client.get(f"/v1/sessions/{session_id}")).status_code == 401
        assert (await gym.client.get(f"/v1/sessions/{session_id}", headers=key)).status_code == 200
