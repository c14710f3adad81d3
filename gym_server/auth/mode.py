"""Whether authentication is on: `auth.mode`, and for `auto` the address the server binds.

The embedded default (127.0.0.1) is reachable only from this machine, so keys there are optional; any
other address (0.0.0.0, a LAN address, a host name that does not resolve to loopback) is reachable by
others, so `auto` turns keys on. `off` on such an address is honoured, with a warning at start.
"""

from __future__ import annotations

import ipaddress
import logging
import socket

from gym_server.core.settings import Settings

__all__ = ["auth_enabled", "is_loopback", "warn_if_exposed"]

log = logging.getLogger("gym_server.auth")


def is_loopback(host: str) -> bool:
    """Whether every address `host` names is a loopback address (`localhost`, 127.0.0.0/8, ::1)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False  # unresolvable: assume it is reachable from elsewhere
    return bool(infos) and all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


def auth_enabled(settings: Settings) -> bool:
    """`on`, `off`, or for `auto` whether the bind address is reachable from other machines."""
    if settings.auth.mode == "auto":
        return not is_loopback(settings.host)
    return settings.auth.mode == "on"


def warn_if_exposed(settings: Settings) -> None:
    """Log a warning when authentication is explicitly off on an address others can reach."""
    if settings.auth.mode == "off" and not is_loopback(settings.host):
        log.warning(
            "AUTHENTICATION IS OFF on %s (auth.mode=off): anyone who reaches this port can create "
            "sessions, read every trajectory and re-score; set GYM_AUTH__MODE=auto or on",
            settings.host,
        )
