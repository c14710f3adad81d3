"""How a sandbox with an allow-list sees its proxy: one read-only folder, a port, and proxy variables.

The proxy's folder (its Unix socket and the forwarder's source) is bind-mounted read-only at `MOUNT`
by both backends, the sandbox keeps its network namespace without interfaces, and each command runs
behind the forwarder on the sandbox's own loopback, `127.0.0.1:PROXY_PORT`. The usual proxy variables
point there, so `urllib`, `requests`, `pip`, `curl` and `git` go through the proxy without being told.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from gym_server.sandbox.egress.proxy import FORWARDER, SOCKET

__all__ = ["MOUNT", "PROXY_PORT", "bwrap_options", "docker_volumes", "proxy_env", "wrap_argv"]

MOUNT: Final = "/run/gym-egress"
PROXY_PORT: Final = 3128

_START = f'python3 -I -S {MOUNT}/{FORWARDER} {PROXY_PORT} {MOUNT}/{SOCKET} && exec "$@"'


def proxy_env() -> dict[str, str]:
    """The proxy variables every command of the sandbox gets (callers' own values win)."""
    url = f"http://127.0.0.1:{PROXY_PORT}"
    names = ("http_proxy", "https_proxy", "all_proxy")
    return {**{name: url for name in names}, **{name.upper(): url for name in names}}


def wrap_argv(argv: list[str]) -> list[str]:
    """`argv` started behind the forwarder: the port listens before the command starts."""
    return ["/bin/sh", "-c", _START, "gym-egress", *argv]


def bwrap_options(folder: Path | None) -> list[str]:
    """bubblewrap options binding the proxy's folder read-only at `MOUNT` (none without a proxy)."""
    return [] if folder is None else ["--ro-bind", str(folder), MOUNT]


def docker_volumes(folder: Path | None) -> dict[str, dict[str, Any]]:
    """The docker SDK's `volumes` entry binding the proxy's folder read-only at `MOUNT`."""
    return {} if folder is None else {str(folder): {"bind": MOUNT, "mode": "ro"}}
