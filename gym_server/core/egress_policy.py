"""Which hosts and ports a sandbox may reach: an environment's egress allow-list and its checks.

An environment lists `host:port` entries; the gym's proxy (see `proxy`) lets a sandbox open a TCP
connection to exactly those and refuses everything else. The checks here are the whole policy, kept
free of I/O but for name resolution, so they can be tested on their own:

- The requested host must be an entry's host, compared in one canonical form: DNS names in lower case
  without a trailing dot, IP literals as addresses.
- IP literals in the legacy forms that `inet_aton` and browsers accept (`2130706433`, `0x7f.1`,
  `0177.0.0.1`, `127.1`) and IPv4-mapped IPv6 literals (`[::ffff:127.0.0.1]`) are refused outright
  rather than interpreted: a name whose last label is a number is not a DNS name, and reading such
  forms as addresses is how allow-lists are walked around. (A resolver's IPv4-mapped answer is checked
  as the IPv4 address it maps.)
- A name is resolved by the proxy itself, every address it resolves to is checked, and the proxy
  connects to the checked addresses only (never resolving again), so a short-lived DNS answer cannot
  swap in another address between the check and the connection.
- An address that is not globally routable (loopback, private, link-local, multicast, shared,
  reserved, unspecified, or such an address embedded in IPv6) is refused unless that exact address is
  itself an entry for that port: an allowed name that resolves into the gym's own network is refused.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

__all__ = [
    "Address",
    "Decision",
    "EgressPolicy",
    "EgressRule",
    "Resolver",
    "address_refusal",
    "canonical_host",
    "parse_rule",
    "system_resolver",
]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Host = Address | str
Resolver = Callable[[str, int], Awaitable[list[Address]]]

_LABEL = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$")
_NUMERIC_LABEL = re.compile(r"^(?:0x[0-9a-f]*|[0-9]+)$")


@dataclass(frozen=True, slots=True)
class EgressRule:
    """One allowed destination: a canonical host (DNS name or address) and a TCP port."""

    host: Host
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if isinstance(self.host, ipaddress.IPv6Address) else str(self.host)
        return f"{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Decision:
    """What the policy says about one connection attempt.

    `addresses` are the checked addresses to connect to, in resolver order; empty when refused.
    """

    host: str
    port: int
    allowed: bool
    reason: str
    addresses: tuple[Address, ...] = ()


def canonical_host(text: str) -> Host:
    """The canonical form of a host as written in a request or an entry.

    Raises:
        ValueError: not a DNS name or IP literal in canonical form (the message says which).
    """
    host = text.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        inner = host[1:-1]
        if "%" in inner:
            raise ValueError(f"{text!r}: an IPv6 zone index is not accepted")
        try:
            address = ipaddress.IPv6Address(inner)
        except ValueError:
            raise ValueError(f"{text!r} is not an IPv6 address") from None
        if address.ipv4_mapped is not None:
            raise ValueError(f"{text!r} is an IPv4-mapped IPv6 literal; write the IPv4 address")
        return address
    if ":" in host:
        raise ValueError(f"{text!r}: write an IPv6 address in brackets, [addr]")
    host = host.removesuffix(".")
    try:
        return ipaddress.IPv4Address(host)
    except ValueError:
        pass
    if not host or len(host) > 253 or not host.isascii():
        raise ValueError(f"{text!r} is not a host name (ASCII, punycode for other scripts)")
    labels = host.split(".")
    if _NUMERIC_LABEL.match(labels[-1]):
        raise ValueError(f"{text!r} is an IP literal in a non-canonical form; write it as a.b.c.d")
    if not all(_LABEL.match(label) for label in labels):
        raise ValueError(f"{text!r} is not a host name")
    return host


def parse_rule(text: str) -> EgressRule:
    """An allow-list entry, `host:port` (`[v6]:port` for IPv6).

    Raises:
        ValueError: naming what is wrong with the entry.
    """
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host:
        raise ValueError(f"egress entry {text!r} must be host:port")
    return EgressRule(canonical_host(host), _port(port, text))


def address_refusal(address: Address, listed: Iterable[Address] = ()) -> str | None:
    """Why `address` may not be reached, or None. Non-public addresses pass only when `listed`."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address in set(listed):
        return None
    embedded = _embedded_ipv4(address)
    if embedded is not None and address_refusal(embedded) is not None:
        return f"{address} embeds the non-public address {embedded}"
    for flag, what in (
        ("is_unspecified", "unspecified"),
        ("is_loopback", "loopback"),
        ("is_link_local", "link-local"),
        ("is_multicast", "multicast"),
        ("is_private", "private"),
        ("is_reserved", "reserved"),
    ):
        if getattr(address, flag):
            return f"{address} is a {what} address"
    if not address.is_global:
        return f"{address} is not a public address"
    return None


def _embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address inside a 6to4, Teredo or NAT64 address, which routers may reach for us."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in ipaddress.IPv6Network("64:ff9b::/96"):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _port(text: str, entry: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ValueError(f"{entry!r}: the port must be a number from 1 to 65535")
    return int(text)


async def system_resolver(name: str, port: int) -> list[Address]:
    """The addresses the host's resolver gives for `name` (TCP), in its order, without repeats."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        name, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    found: list[Address] = []
    for family, _, _, _, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6):
            address = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])
            if address not in found:
                found.append(address)
    return found


class EgressPolicy:
    """An allow-list of destinations and the resolver the proxy checks names with.

    Args:
        rules: the allowed destinations (at least one; an empty list means no egress, so no policy).
        resolver: turns a name into addresses; the system's by default.
        max_connections: connections the sandbox may hold open at once (the operator's cap).
        connect_timeout_s: how long the proxy waits for a connection upstream to open.
    """

    def __init__(
        self,
        rules: Iterable[EgressRule],
        *,
        resolver: Resolver = system_resolver,
        max_connections: int = 32,
        connect_timeout_s: float = 10.0,
    ) -> None:
        self.rules = tuple(dict.fromkeys(rules))
        if not self.rules:
            raise ValueError("an egress policy needs at least one entry")
        self._resolver = resolver
        self.max_connections = max_connections
        self.connect_timeout_s = connect_timeout_s

    def __repr__(self) -> str:
        return f"EgressPolicy({[str(rule) for rule in self.rules]})"

    @classmethod
    def from_entries(cls, entries: Iterable[str], *, resolver: Resolver = system_resolver) -> EgressPolicy:
        """A policy from `host:port` strings (ValueError naming a bad entry), with default caps."""
        return cls([parse_rule(entry) for entry in entries], resolver=resolver)

    def listed(self, port: int) -> list[Address]:
        """The addresses listed literally for `port`: the only non-public ones that may be reached."""
        return [
            rule.host
            for rule in self.rules
            if rule.port == port and isinstance(rule.host, ipaddress.IPv4Address | ipaddress.IPv6Address)
        ]

    async def decide(self, host_text: str, port: int) -> Decision:
        """Check one requested destination; never raises (a refusal carries the reason)."""
        try:
            host = canonical_host(host_text)
        except ValueError as exc:
            return Decision(host_text, port, False, str(exc))
        if EgressRule(host, port) not in self.rules:
            return Decision(str(host), port, False, f"{EgressRule(host, port)} is not on the allow-list")
        if not isinstance(host, str):
            return self._checked(str(host), port, [host])
        try:
            addresses = await self._resolver(host, port)
        except (OSError, UnicodeError) as exc:
            return Decision(host, port, False, f"{host} does not resolve ({exc})")
        if not addresses:
            return Decision(host, port, False, f"{host} resolves to no address")
        return self._checked(host, port, addresses)

    def _checked(self, host: str, port: int, addresses: list[Address]) -> Decision:
        listed = self.listed(port)
        normal = [
            a.ipv4_mapped if isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped else a for a in addresses
        ]
        for address in normal:
            why = address_refusal(address, listed)
            if why is not None:
                return Decision(host, port, False, why)
        return Decision(host, port, True, "allowed", tuple(normal))
