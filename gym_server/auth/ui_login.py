"""`/ui/login` and `/ui/logout`: a small server-rendered form that trades an API key for a login cookie.

The key is checked like a bearer key (and must carry `read`); the browser then holds only an opaque
cookie (HttpOnly, SameSite=Strict, Path=/ui, Secure when served over https). Logging in from another
origin is refused (login CSRF), and logging out is a POST carrying the login's CSRF token (checked by
the auth middleware, as for every state-changing /ui request). With authentication off both just send
the browser to /ui.
"""

from __future__ import annotations

import html
from typing import Annotated, cast
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from gym_server.auth.keys import Scope
from gym_server.auth.middleware import AuthGate, same_origin
from gym_server.auth.policy import UI_LOGIN, UI_LOGOUT, UI_PREFIX
from gym_server.auth.ui_sessions import COOKIE_NAME, CSRF_FIELD

__all__ = ["get_gate", "router"]

router = APIRouter(tags=["ui"], include_in_schema=False)

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>gym-server: log in</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{{font-family:system-ui,sans-serif;max-width:28rem;margin:4rem auto;padding:0 1rem}}
input{{width:100%;padding:.5rem;margin:.5rem 0;box-sizing:border-box}}.error{{color:#b00020}}</style>
</head><body><h1>gym-server</h1>
<form method="post" action="{action}">
<label for="key">API key (with the <code>read</code> scope)</label>
<input id="key" name="key" type="password" autocomplete="off" required autofocus>
<input type="hidden" name="next" value="{next}">
<button type="submit">Log in</button></form>
{error}</body></html>"""

_LOGOUT_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>gym-server: log out</title></head><body>
<form method="post" action="{action}"><input type="hidden" name="{field}" value="{token}">
<button type="submit">Log out</button></form></body></html>"""


async def get_gate(request: Request) -> AuthGate:
    return cast(AuthGate, request.app.state.auth_gate)


GateDep = Annotated[AuthGate, Depends(get_gate)]


def _safe_next(target: str | None) -> str:
    """Only a path under /ui of this server (never `//host`, which a browser reads as another site)."""
    if target and (target == UI_PREFIX or target.startswith(UI_PREFIX + "/")) and "\\" not in target:
        return target
    return UI_PREFIX


def _page(next_path: str, error: str = "", status_code: int = 200) -> HTMLResponse:
    body = _PAGE.format(
        action=UI_LOGIN,
        next=html.escape(next_path),
        error=f'<p class="error" role="alert">{html.escape(error)}</p>' if error else "",
    )
    return HTMLResponse(body, status_code=status_code, headers={"Cache-Control": "no-store"})


@router.get(UI_LOGIN)
async def login_form(gate: GateDep, next: Annotated[str | None, Query(max_length=2048)] = None) -> Response:
    if not gate.enabled:
        return RedirectResponse(_safe_next(next), status_code=303)
    return _page(_safe_next(next))


@router.post(UI_LOGIN)
async def login(request: Request, gate: GateDep) -> Response:
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    next_path = _safe_next(form.get("next", [None])[0])
    if not gate.enabled:
        return RedirectResponse(next_path, status_code=303)
    if not same_origin(request.scope):
        return _page(next_path, "This login came from another site and was refused.", 403)
    principal = gate.keys.verify(form.get("key", [""])[0].strip())
    if principal is None:
        return _page(next_path, "That key is not valid (unknown, revoked or mistyped).", 401)
    if not principal.allows(Scope.READ):
        return _page(next_path, "That key lacks the read scope the inspector needs.", 403)
    cookie, _ = gate.ui_sessions.open(principal.key_id)
    response = RedirectResponse(next_path, status_code=303)
    response.set_cookie(
        COOKIE_NAME,
        cookie,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path=UI_PREFIX,
        max_age=None,
    )
    return response


@router.get(UI_LOGOUT)
async def logout_form(request: Request) -> Response:
    """A one-button form (the pattern for every state-changing /ui form: it posts the login's CSRF token,
    which the auth middleware puts in `request.state.csrf_token`)."""
    token = getattr(request.state, "csrf_token", "")
    page = _LOGOUT_PAGE.format(action=UI_LOGOUT, field=CSRF_FIELD, token=html.escape(token))
    return HTMLResponse(page, headers={"Cache-Control": "no-store"})


@router.post(UI_LOGOUT)
async def logout(request: Request, gate: GateDep) -> Response:
    """Ends the login (the middleware has checked its CSRF token); a bearer-key request just gets 303."""
    cookie = request.cookies.get(COOKIE_NAME)
    if cookie:
        gate.ui_sessions.close(cookie)
    response = RedirectResponse(UI_LOGIN, status_code=303)
    response.delete_cookie(COOKIE_NAME, path=UI_PREFIX, httponly=True, samesite="strict")
    return response
