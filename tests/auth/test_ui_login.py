"""The /ui login over HTTP (httpx against the app): a key buys an opaque cookie (HttpOnly,
SameSite=Strict, Path=/ui, Secure over https); the cookie opens /ui only; every state-changing /ui
request needs the login's CSRF token and a same-origin `Origin`; logout and revocation end the login."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import httpx
from authtest import KeyMaker, bearer, reloaded_twice
from conftest import AppHarness


async def log_in(client: httpx.AsyncClient, key: str, next_path: str = "/ui/logout") -> httpx.Response:
    return await client.post("/ui/login", data={"key": key, "next": next_path})


def csrf_of(page: httpx.Response) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert match, page.text
    return match[1]


async def test_login_sets_a_strict_http_only_cookie_that_opens_ui_only(
    secured: Callable[..., Any], keys: KeyMaker, tenant: Callable[[], str]
) -> None:
    key = keys.create(tenant(), "read")
    async with secured() as gym:
        client = gym.client
        # Not logged in: a browser asking for a page is sent to the form, which remembers where it was.
        away = await client.get("/ui/logout?x=1")
        assert away.status_code == 303
        assert away.headers["location"] == "/ui/login?next=%2Fui%2Flogout%3Fx%3D1"
        form = await client.get("/ui/login", params={"next": "/ui/logout"})
        assert form.status_code == 200 and 'name="key"' in form.text and 'value="/ui/logout"' in form.text
        assert (await client.get("/ui/static/app.js")).status_code == 200  # public: past the gate

        refused = await log_in(client, key[:-1] + "x")
        assert refused.status_code == 401 and "not valid" in refused.text
        assert "set-cookie" not in refused.headers

        landed = await log_in(client, key, next_path="//evil.example/ui")
        assert landed.status_code == 303 and landed.headers["location"] == "/ui"  # no open redirect
        cookie = landed.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
        assert "Secure" not in cookie  # plain http here; see the https test
        assert key not in cookie
        page = await client.get("/ui/logout")
        assert page.status_code == 200 and csrf_of(page)
        # The cookie is not a credential for the API (only /ui reads it).
        assert (await client.get("/v1/rollouts")).status_code == 401


async def test_a_key_without_read_cannot_log_in(
    secured: Callable[..., Any], keys: KeyMaker, tenant: Callable[[], str]
) -> None:
    key = keys.create(tenant(), "episodes")
    async with secured() as gym:
        response = await log_in(gym.client, key)
        assert response.status_code == 403 and "lacks the read scope" in response.text
        assert "set-cookie" not in response.headers
        assert (await gym.client.get("/ui/logout", headers=bearer(key))).status_code == 403


async def test_state_changing_ui_requests_need_the_csrf_token_and_same_origin(
    secured: Callable[..., Any], keys: KeyMaker, tenant: Callable[[], str]
) -> None:
    key = keys.create(tenant(), "read")
    async with secured() as gym:
        client = gym.client
        await log_in(client, key)
        token = csrf_of(await client.get("/ui/logout"))
        # Forged: no token, a wrong one, or the right one from another origin.
        for data, headers in (
            ({}, {}),
            ({"csrf_token": "guess"}, {}),
            ({"csrf_token": token}, {"Origin": "http://evil.example"}),
        ):
            forged = await client.post("/ui/logout", data=data, headers=headers)
            assert forged.status_code == 403, forged.text
        assert (await client.get("/ui/logout")).status_code == 200  # still logged in
        # A login form posted from another site is refused too (login CSRF).
        elsewhere = await client.post(
            "/ui/login", data={"key": key}, headers={"Origin": "http://evil.example"}
        )
        assert elsewhere.status_code == 403
        # The token in a header works as well as in the form; the same origin is fine.
        out = await client.post("/ui/logout", headers={"X-CSRF-Token": token, "Origin": "http://localhost"})
        assert out.status_code == 303 and out.headers["location"] == "/ui/login"
        assert (await client.get("/ui/logout")).status_code == 303  # logged out


async def test_logout_by_form_and_revocation_end_the_login(
    secured: Callable[..., Any], keys: KeyMaker, tenant: Callable[[], str]
) -> None:
    name = tenant()
    first, second = keys.create(name, "read"), keys.create(name, "read")
    async with secured() as gym:
        client = gym.client
        await log_in(client, first)
        out = await client.post("/ui/logout", data={"csrf_token": csrf_of(await client.get("/ui/logout"))})
        assert out.status_code == 303
        assert (await client.get("/ui/logout")).status_code == 303
        await log_in(client, second)
        assert (await client.get("/ui/logout")).status_code == 200
        keys.revoke(second)
        await reloaded_twice(gym.app)
        assert (await client.get("/ui/logout")).status_code != 200


async def test_the_cookie_is_secure_over_https(
    app_factory: Callable[..., Any], keys: KeyMaker, tenant: Callable[[], str]
) -> None:
    key = keys.create(tenant(), "read")
    async with app_factory(auth={"mode": "on"}) as gym:
        harness: AppHarness = gym
        transport = httpx.ASGITransport(app=harness.app)
        async with httpx.AsyncClient(transport=transport, base_url="https://localhost") as client:
            response = await log_in(client, key)
            assert response.status_code == 303 and "Secure" in response.headers["set-cookie"]


async def test_with_auth_off_the_login_page_sends_the_browser_on(app_factory: Callable[..., Any]) -> None:
    async with app_factory(auth={"mode": "off"}) as gym:
        response = await gym.client.get("/ui/login", params={"next": "/ui/runs"})
        assert response.status_code == 303 and response.headers["location"] == "/ui/runs"
