"""The `Host` and `Origin` checks in front of every route, fast path, facade and WebSocket (DNS rebinding).

A page on a domain its owner points at 127.0.0.1 (DNS rebinding) is, to the browser, same-origin with
that domain, so it can drive and read a gym on loopback, where keys are off by default. The browser
still names the page's domain in `Host`, so the gym answers only requests whose `Host` is a name it
is known by: the loopback names (`localhost`, `*.localhost`, 127.0.0.0/8, `[::1]`), the address it
binds, and the operator's `GYM_HTTP__ALLOWED_HOSTS`. On a wildcard bind (`0.0.0.0`, `::`) every IP
literal and this machine's host name pass as well: a browser that sends an IP literal connects to that
very address, so no DNS answer can be rebound behind it; other names (a compose service, a public name
behind a proxy) must be listed; `*` turns the check off. Any other `Host`: 421 problem+json
(`misdirected-request`). A request without `Host` (HTTP/1.0, not a browser's) passes.

State-changing requests (POST, PUT, PATCH, DELETE) and WebSocket handshakes, which browsers send
cross-origin without asking the server, are refused with 403 problem+json (`cross-origin`) when they
carry an `Origin` other than the server's own (`Origin`'s host and port equal to `Host`) or one of
`GYM_HTTP__ALLOWED_ORIGINS`. Requests without `Origin` (non-browser clients) pass.

Per request: one pass over the headers and a set lookup; a `Host` seen once is remembered (up to a
bound), so the usual request parses nothing.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass, field
from functools import partial
from typing import ClassVar

from starlette.types import ASGIApp, Receive, Scope, Send

from gym_server.core.errors import GymError
from gym_server.core.problems import gym_error_problem
from gym_server.core.settings import Settings

__all__ = ["CrossOriginRefused", "HostGuard", "HostPolicy", "MisdirectedRequest"]

_STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
_WILDCARDS = frozenset({"0.0.0.0", "::", ""})
_REMEMBERED = 1024  # distinct accepted `Host` values kept for the fast path


class MisdirectedRequest(GymError):
    """The request names a host this server is not known by (a DNS-rebinding page, say)."""

    status = 421
    slug: ClassVar[str] = "misdirected-request"
    title: ClassVar[str] = "Misdirected request"


class CrossOriginRefused(GymError):
    """A browser request from another origin tried to change state or open a WebSocket."""

    status = 403
    slug: ClassVar[str] = "cross-origin"
    title: ClassVar[str] = "Cross-origin request refused"


def _host_name(value: str) -> str:
    """The host part of a `Host` value (no port, no brackets), lower case, without a trailing dot."""
    value = value.strip().lower()
    if value.startswith("["):
        name = value[1 : value.find("]")] if "]" in value else value[1:]
    elif value.count(":") == 1:
        name = value.partition(":")[0]
    else:
        name = value  # a name, or a bare IPv6 address (not valid in Host, but unambiguous)
    return name.rstrip(".")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _is_loopback(name: str) -> bool:
    if name == "localhost" or name.endswith(".localhost"):  # RFC 6761: always loopback
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass
class HostPolicy:
    """Which `Host` and `Origin` values a server accepts; built once from its settings."""

    names: frozenset[str]
    any_host: bool = False
    ip_literals: bool = False
    origins: frozenset[str] = frozenset()
    any_origin: bool = False
    _accepted: set[bytes] = field(default_factory=set, repr=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> HostPolicy:
        """The policy of a server bound to `settings.host`."""
        bound = _host_name(settings.host)
        listed = {_host_name(name) for name in settings.http.allowed_hosts}
        wildcard = bound in _WILDCARDS
        names = {*_LOOPBACK_NAMES, *listed, bound}
        if wildcard:
            names.add(socket.gethostname().lower())
        origins = {origin.strip().rstrip("/").lower() for origin in settings.http.allowed_origins}
        return cls(
            names=frozenset(names - {"", "*"}),
            any_host="*" in listed,
            ip_literals=wildcard,
            origins=frozenset(origins - {"*"}),
            any_origin="*" in origins,
        )

    def host_allowed(self, raw: bytes) -> bool:
        """Whether a request naming `raw` (the `Host` header's bytes) is for this server."""
        if raw in self._accepted or self.any_host:
            return True
        name = _host_name(raw.decode("latin-1"))
        allowed = name in self.names or _is_loopback(name) or (self.ip_literals and _is_ip(name))
        if allowed and len(self._accepted) < _REMEMBERED:
            self._accepted.add(raw)
        return allowed

    def origin_allowed(self, origin: bytes, host: bytes | None) -> bool:
        """Whether a browser at `origin` may change state here: the server's own origin or a listed one."""
        if self.any_origin:
            return True
        value = origin.decode("latin-1").strip().lower()
        _, sep, netloc = value.partition("://")
        if sep and host is not None and netloc == host.decode("latin-1").strip().lower():
            return True  # same host and port; the scheme may differ behind a TLS-terminating proxy
        return value in self.origins


class HostGuard:
    """A stage of the gym's front (`core.asgi.Stage`) applying a `HostPolicy` to HTTP requests and
    WebSocket handshakes (see above)."""

    def __init__(self, policy: HostPolicy) -> None:
        self.policy = policy

    def take(self, scope: Scope, rest: ASGIApp) -> ASGIApp | None:
        """None for a request the policy lets through, else the app that refuses it."""
        kind = scope["type"]
        if kind != "http" and kind != "websocket":
            return None
        headers = dict(scope["headers"])  # in C: cheaper than a loop of Python over them
        host = headers.get(b"host")
        origin = headers.get(b"origin")
        if host is not None and not self.policy.host_allowed(host):
            error: GymError = MisdirectedRequest(
                f"this server does not answer for the host {_host_name(host.decode('latin-1'))!r}; "
                "its operator can allow it with GYM_HTTP__ALLOWED_HOSTS"
            )
        elif (
            origin is not None
            and (kind == "websocket" or scope["method"] in _STATE_CHANGING)
            and not self.policy.origin_allowed(origin, host)
        ):
            error = CrossOriginRefused(
                f"requests from the origin {origin.decode('latin-1')!r} may not change state here; "
                "its operator can allow it with GYM_HTTP__ALLOWED_ORIGINS"
            )
        else:
            return None
        return partial(_refuse, error=error)


async def _refuse(scope: Scope, receive: Receive, send: Send, error: GymError) -> None:
    response = gym_error_problem(error, instance=scope["path"])
    if scope["type"] == "http":
        await response(scope, receive, send)
        return
    if "websocket.http.response" not in scope.get("extensions", {}):
        await send({"type": "websocket.close", "code": 1008})  # the client sees 403
        return
    headers = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in response.headers.items()]
    await send({"type": "websocket.http.response.start", "status": error.status, "headers": headers})
    await send({"type": "websocket.http.response.body", "body": bytes(response.body)})
