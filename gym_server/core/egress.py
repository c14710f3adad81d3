"""Which endpoints this server may call: the operator's allow-list of URL prefixes.

`POST /v1/rollouts` names a policy URL that the server then calls. Left open, any client of the gym
could make it reach what only the gym's host can reach (a cloud metadata address, an admin port, a
private network) and read back what the error text reveals. So the endpoints come from the operator's
configuration (`GYM_ROLLOUT_RUNS__POLICY_URLS`) and a request may only pick among them; anything else
is refused before a connection is made.

A prefix is a URL whose scheme and host must match exactly (hosts compared as httpx parses them, the
parser that then connects, so `http://127.0.0.1:80@169.254.169.254/` is the metadata host, not
loopback), whose port, when given, must match (no port: any port of that host), and whose path, when
given, must be a whole-segment prefix of the policy's path (dot segments resolved, no escapes). Both
sides are compared at the policy's server root (without a trailing `/v1`), because the clients call
paths beside `/v1` (`/tokenize`).
A URL carrying credentials, a query or a fragment is refused: a key goes in `api_key`, which is sent
only to an allowed endpoint and never stored. So is one that parsers read differently (issue 37): a port
that is not 1 to 65535 in ASCII digits (httpx read `:+80` as no port and `:１８３０１` as 18301, where
`urlsplit` refused both), and a path with dot segments (`/tenantB/../tenantA` matched the prefix
`/tenantA` as httpx resolves it, and went out as written). `admit` hands back the parsed URL it checked,
for the caller to connect to without parsing the text again.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from gym_trainer.samplers._http import server_root

__all__ = ["DEFAULT_POLICY_URLS", "AllowedPrefix", "EndpointRefused", "admit", "parse_prefix", "refusal"]

# Loopback only: a policy served on this host (`gym-server policy serve`, a local vLLM) works out of
# the box; anything else has to be named by the operator.
DEFAULT_POLICY_URLS = ("http://127.0.0.1", "http://localhost", "http://[::1]")

_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class AllowedPrefix:
    """One allowed endpoint prefix; `port` None means any port of the host."""

    scheme: str
    host: str
    port: int | None
    path: str

    def allows(self, url: httpx.URL) -> bool:
        port = url.port or _DEFAULT_PORTS[url.scheme]
        if (url.scheme, url.host) != (self.scheme, self.host) or self.port not in (None, port):
            return False
        path = url.raw_path.decode("ascii")
        return not self.path or path == self.path or path.startswith(self.path + "/")


def parse_prefix(text: str) -> AllowedPrefix:
    """The prefix an operator wrote; ValueError (naming what is wrong) for one that cannot be matched."""
    url = _parse(text)
    explicit = urlsplit(text).port  # httpx drops a default port; the operator may still have meant it
    return AllowedPrefix(url.scheme, url.host, explicit, url.raw_path.decode("ascii").rstrip("/"))


class EndpointRefused(ValueError):
    """`admit`'s refusal; its text says why."""


def admit(base_url: str, prefixes: list[str], setting: str) -> httpx.URL:
    """`base_url` at its server root, parsed once, when one of `prefixes` allows it.

    Raises:
        EndpointRefused: not a usable endpoint, or not one of the operator's.
    """
    try:
        url = _parse(base_url)
    except ValueError as exc:
        raise EndpointRefused(f"policy.base_url is not a usable endpoint: {exc}") from None
    if any(parse_prefix(prefix).allows(url) for prefix in prefixes):
        return url
    origin = f"{url.scheme}://{url.netloc.decode('ascii', 'replace')}"
    raise EndpointRefused(
        f"policy.base_url {origin} is not an endpoint this server may call; the operator lists the "
        f"policy endpoints it may reach in {setting} (URL prefixes, default: loopback only)"
    )


def refusal(base_url: str, prefixes: list[str], setting: str) -> str | None:
    """Why the server may not call `base_url`, or None when one of `prefixes` allows it."""
    try:
        admit(base_url, prefixes, setting)
    except EndpointRefused as exc:
        return str(exc)
    return None


def _parse(text: str) -> httpx.URL:
    """`text` at its server root, parsed as httpx will connect to it, or ValueError saying why not."""
    try:
        url = httpx.URL(server_root(text))
    except httpx.InvalidURL as exc:
        raise ValueError(f"not a URL ({exc})") from None
    if url.scheme not in _DEFAULT_PORTS:
        raise ValueError("the scheme must be http or https")
    if not url.host:
        raise ValueError("the URL names no host")
    if url.userinfo:
        raise ValueError("credentials in the URL are not accepted (give the key as api_key)")
    if url.query or url.fragment:
        raise ValueError("a query or fragment is not accepted")
    if b"%" in url.raw_path:  # an escaped `..` would pass a path prefix, then be undone upstream
        raise ValueError("percent-escapes in the path are not accepted")
    written = urlsplit(server_root(text))
    default = _DEFAULT_PORTS[url.scheme]
    try:
        port = written.port  # Python's reading: ASCII digits within 0-65535, else ValueError
    except ValueError:
        port = 0
    if port == 0 or (port or default) != (url.port or default):  # httpx reads `:+80` as no port
        raise ValueError("the port must be a number from 1 to 65535, in ASCII digits")
    if any(segment in (".", "..") for segment in written.path.split("/")):
        raise ValueError("dot segments (`.`, `..`) in the path are not accepted")
    return url
