"""The auth gate: a stage of the gym's front, before every route, fast path and protocol facade.

Per request, from memory only (no database round trip): the scope the path needs (`policy`), the
principal of the bearer key (`KeyTable`) or of the /ui login cookie (`UiSessions`), the scope check, the
CSRF check for a cookie-authenticated state-changing /ui request, and the tenant's request-rate quota.
Then `request.state.principal` is set (None when authentication is off) and `current_tenant` holds the
principal's tenant while the request is served.

Answers: 401 problem+json with `WWW-Authenticate: Bearer` for no, a malformed, unknown or revoked key
(a browser without a login asking for a /ui page is sent to /ui/login instead), 403 for a missing scope
or a failed CSRF check, 429 with `Retry-After` over the rate quota. A WebSocket handshake that fails
is closed before it is accepted (the client sees 403). Keys, hashes and cookies are never logged.

Cookies authenticate /ui only: the API takes bearer keys, which a browser never attaches by itself, so
cross-site requests cannot ride on a login there. Within /ui, cookies are SameSite=Strict, and every
state-changing request must also carry the login's CSRF token (form field `csrf_token` or header
`X-CSRF-Token`) and, when the browser sends one, an `Origin` equal to the server's own.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from functools import partial
from urllib.parse import parse_qs, quote

from starlette.requests import ClientDisconnect, cookie_parser
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Send
from starlette.types import Scope as AsgiScope

from gym_server.auth.context import current_tenant
from gym_server.auth.errors import Forbidden, Unauthorized
from gym_server.auth.keys import Principal, Scope
from gym_server.auth.keytable import KeyTable
from gym_server.auth.policy import PUBLIC, UI_LOGIN, Requirement, is_ui, required_scope
from gym_server.auth.quotas import TenantQuotas
from gym_server.auth.ui_sessions import COOKIE_NAME, CSRF_FIELD, CSRF_HEADER, UiSessions
from gym_server.core.asgi import read_body, replay_body
from gym_server.core.errors import GymError
from gym_server.core.problems import gym_error_problem

__all__ = ["AuthGate", "AuthGuard", "same_origin"]

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_FORM = b"application/x-www-form-urlencoded"
_MAX_FORM_BYTES = 64 * 1024


@dataclass(eq=False)
class AuthGate:
    """What the gate needs, built once per app; `enabled` False makes it a pass-through."""

    enabled: bool
    keys: KeyTable
    ui_sessions: UiSessions
    quotas: TenantQuotas


def same_origin(scope: AsgiScope) -> bool:
    """False only when the browser names an `Origin` other than this server's (absent: not a browser's)."""
    headers: dict[bytes, bytes] = dict(scope["headers"])
    origin = headers.get(b"origin")
    if origin is None:
        return True
    host = headers.get(b"host", b"").decode("latin-1")
    scheme: str = scope.get("scheme", "http")
    return origin.decode("latin-1") == f"{scheme}://{host}"


def _bearer(scope: AsgiScope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else ""
    return None


def _cookie(scope: AsgiScope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"cookie":
            return cookie_parser(value.decode("latin-1")).get(COOKIE_NAME)
    return None


class AuthGuard:
    """The gate as a stage of the gym's front (`core.asgi.Stage`); see the module docstring."""

    def __init__(self, gate: AuthGate) -> None:
        self.gate = gate

    def take(self, scope: AsgiScope, rest: ASGIApp) -> ASGIApp | None:
        """None for a request that needs no key (or with the gate off), else the app that serves it as
        its principal's tenant, or refuses it."""
        kind = scope["type"]
        if kind != "http" and kind != "websocket":
            return None
        scope.setdefault("state", {})["principal"] = None
        if not self.gate.enabled:
            return None
        method = scope.get("method", "GET")
        need = required_scope(method, scope["path"])
        if need is PUBLIC:
            return None
        try:
            principal, by_cookie = self._identify(scope, need)
            if by_cookie and method not in _SAFE_METHODS:
                return partial(self._after_csrf_check, principal=principal, rest=rest)
            self.gate.quotas.take_request(principal.tenant)
        except GymError as exc:
            return partial(self._refuse, exc=exc)
        scope["state"]["principal"] = principal
        return partial(_as_tenant, tenant=principal.tenant, app=rest)

    def _identify(self, scope: AsgiScope, need: Scope | Requirement) -> tuple[Principal, bool]:
        """The request's principal, and whether a /ui login cookie named it; raises the refusal of a
        request with no valid key or login, or one whose key lacks the scope."""
        bearer = _bearer(scope)
        principal: Principal | None = None
        by_cookie = False
        if bearer:
            principal = self.gate.keys.verify(bearer)
        elif bearer is None and is_ui(scope["path"]):
            cookie = _cookie(scope)
            login = self.gate.ui_sessions.get(cookie) if cookie else None
            if login is not None:
                principal = self.gate.keys.principal(login.key_id)
                by_cookie = principal is not None
                scope["state"]["csrf_token"] = login.csrf_token
        if principal is None:
            raise Unauthorized()
        if isinstance(need, Scope) and not principal.allows(need):
            raise Forbidden(f"this key lacks the {need!s} scope this request needs")
        return principal, by_cookie

    async def _after_csrf_check(
        self, scope: AsgiScope, receive: Receive, send: Send, *, principal: Principal, rest: ASGIApp
    ) -> None:
        """A cookie-authenticated state change: served only with the login's CSRF token (which may be a
        field of its form body, read here and replayed)."""
        try:
            receive = await self._check_csrf(scope, receive)
            self.gate.quotas.take_request(principal.tenant)
        except GymError as exc:
            await self._refuse(scope, receive, send, exc)
            return
        scope["state"]["principal"] = principal
        await _as_tenant(scope, receive, send, tenant=principal.tenant, app=rest)

    async def _check_csrf(self, scope: AsgiScope, receive: Receive) -> Receive:
        """Refuse a cookie-authenticated state change without the login's CSRF token or from elsewhere."""
        if not same_origin(scope):
            raise Forbidden("cross-origin request refused")
        expected: str = scope["state"]["csrf_token"]
        headers = dict(scope["headers"])
        sent = headers.get(CSRF_HEADER, b"").decode("latin-1")
        if not sent and headers.get(b"content-type", b"").split(b";")[0].strip() == _FORM:
            try:
                raw = await read_body(receive)
            except ClientDisconnect:
                raw = b""
            receive = replay_body(raw, receive)
            if len(raw) <= _MAX_FORM_BYTES:
                sent = parse_qs(raw.decode("latin-1")).get(CSRF_FIELD, [""])[0]
        if not sent or not hmac.compare_digest(sent.encode(), expected.encode()):
            raise Forbidden("missing or wrong CSRF token: reload the page and try again")
        return receive

    async def _refuse(self, scope: AsgiScope, receive: Receive, send: Send, exc: GymError) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        if isinstance(exc, Unauthorized) and is_ui(scope["path"]) and scope.get("method") == "GET":
            target = scope["path"] + (
                f"?{scope['query_string'].decode('latin-1')}" if scope["query_string"] else ""
            )
            response: Response = RedirectResponse(
                f"{UI_LOGIN}?next={quote(target, safe='')}", status_code=303
            )
        else:
            response = gym_error_problem(exc, instance=scope["path"])
        await response(scope, receive, send)


async def _as_tenant(scope: AsgiScope, receive: Receive, send: Send, *, tenant: str, app: ASGIApp) -> None:
    """`app` serving the request with `current_tenant` set to the principal's tenant."""
    token = current_tenant.set(tenant)
    try:
        await app(scope, receive, send)
    finally:
        current_tenant.reset(token)
