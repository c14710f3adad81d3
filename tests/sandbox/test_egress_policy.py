"""The egress address policy on its own: entry parsing, canonical hosts, non-public addresses, names
that resolve into the gym's network, the operator's switch and ceiling, and where environments
declare their allow-list. Name resolution goes through the system resolver where the answer is
known offline (`localhost`), and through a stated resolver where a test needs DNS answers that no
offline machine gives (a name with a public and a private address)."""

from __future__ import annotations

import ipaddress
import logging
from typing import ClassVar

import pytest

from gym_env_mcp_tools.manifest import StdioServer
from gym_server.core.egress_policy import (
    Address,
    EgressPolicy,
    EgressRule,
    Resolver,
    address_refusal,
    parse_rule,
)
from gym_server.core.errors import EnvironmentDefinitionError
from gym_server.core.settings import EgressSettings, Settings
from gym_server.sandbox.egress.declared import sandbox_policy
from gym_server.sdk.environment import Environment, VerifyResult

IP = ipaddress.ip_address


def answers(*addresses: str) -> Resolver:
    async def resolver(name: str, port: int) -> list[Address]:
        return [IP(a) for a in addresses]

    return resolver


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [
        ("api.example.com:443", "api.example.com", 443),
        ("API.Example.COM.:443", "api.example.com", 443),
        ("127.0.0.1:8080", IP("127.0.0.1"), 8080),
        ("[2001:db8::1]:80", IP("2001:db8::1"), 80),
        ("pypi.org:443", "pypi.org", 443),
    ],
)
def test_entries_parse_to_one_canonical_form(text: str, host: object, port: int) -> None:
    assert parse_rule(text) == EgressRule(host, port)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("example.com", "host:port"),
        ("example.com:0", "port"),
        ("example.com:70000", "port"),
        ("example.com:http", "port"),
        ("2130706433:80", "non-canonical"),
        ("0x7f.1:80", "non-canonical"),
        ("0177.0.0.1:80", "non-canonical"),
        ("127.1:80", "non-canonical"),
        ("10.0.0.010:80", "non-canonical"),
        ("[::ffff:127.0.0.1]:80", "IPv4-mapped"),
        ("[fe80::1%eth0]:80", "zone"),
        ("::1:80", "brackets"),
        ("exa mple.com:80", "not a host name"),
        ("bücher.de:80", "ASCII"),
        ("user@example.com:80", "not a host name"),
    ],
)
def test_bad_entries_are_refused_with_the_reason(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_rule(text)


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.5.6.7",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",  # cloud metadata: link-local
        "100.64.0.1",  # shared address space (carrier NAT)
        "0.0.0.0",
        "224.0.0.251",
        "239.1.2.3",
        "240.0.0.1",
        "255.255.255.255",
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "ff02::1",
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
        "2002:7f00:1::",  # 6to4 around 127.0.0.1
        "64:ff9b::a00:1",  # NAT64 around 10.0.0.1
        "2001:db8::1",  # documentation
    ],
)
def test_non_public_addresses_are_refused(address: str) -> None:
    assert address_refusal(IP(address)) is not None


@pytest.mark.parametrize("address", ["1.1.1.1", "151.101.0.223", "2606:4700:4700::1111"])
def test_public_addresses_pass(address: str) -> None:
    assert address_refusal(IP(address)) is None


def test_a_non_public_address_passes_only_when_listed_exactly() -> None:
    assert address_refusal(IP("127.0.0.1"), [IP("127.0.0.1")]) is None
    assert address_refusal(IP("::ffff:127.0.0.1"), [IP("127.0.0.1")]) is None  # the same address
    assert address_refusal(IP("127.0.0.2"), [IP("127.0.0.1")]) is not None
    assert address_refusal(IP("10.0.0.1"), [IP("10.0.0.2")]) is not None


async def test_a_listed_loopback_literal_is_allowed_on_its_port_only() -> None:
    policy = EgressPolicy.from_entries(["127.0.0.1:8080"])
    allowed = await policy.decide("127.0.0.1", 8080)
    assert allowed.allowed and allowed.addresses == (IP("127.0.0.1"),)
    other_port = await policy.decide("127.0.0.1", 8081)
    assert not other_port.allowed and "not on the allow-list" in other_port.reason


@pytest.mark.parametrize(
    "host", ["2130706433", "0x7f.1", "0x7f000001", "0177.0.0.1", "127.1", "127.0.1", "[::ffff:127.0.0.1]"]
)
async def test_odd_forms_of_a_listed_address_are_refused_not_interpreted(host: str) -> None:
    decision = await EgressPolicy.from_entries(["127.0.0.1:8080"]).decide(host, 8080)
    assert not decision.allowed
    assert "non-canonical" in decision.reason or "IPv4-mapped" in decision.reason


async def test_a_listed_name_that_resolves_to_loopback_is_refused() -> None:
    """`localhost` comes from /etc/hosts through the system resolver: listed, yet loopback."""
    decision = await EgressPolicy.from_entries(["localhost:8080"]).decide("localhost", 8080)
    assert not decision.allowed and "loopback" in decision.reason


async def test_a_name_is_allowed_onto_loopback_when_that_exact_address_is_listed_too() -> None:
    policy = EgressPolicy.from_entries(["localhost:8080", "127.0.0.1:8080", "[::1]:8080"])
    decision = await policy.decide("LOCALHOST.", 8080)
    assert decision.allowed and IP("127.0.0.1") in decision.addresses


async def test_every_resolved_address_is_checked_and_only_those_are_connected_to() -> None:
    mixed = EgressPolicy.from_entries(["api.example.com:443"], resolver=answers("93.184.216.34", "10.0.0.7"))
    refused = await mixed.decide("api.example.com", 443)
    assert not refused.allowed and "10.0.0.7" in refused.reason and refused.addresses == ()
    public = EgressPolicy.from_entries(["api.example.com:443"], resolver=answers("93.184.216.34"))
    allowed = await public.decide("api.example.com", 443)
    assert allowed.allowed and allowed.addresses == (IP("93.184.216.34"),)


async def test_a_resolver_answer_mapped_into_ipv6_is_checked_as_ipv4() -> None:
    policy = EgressPolicy.from_entries(["rebind.example:80"], resolver=answers("::ffff:169.254.169.254"))
    decision = await policy.decide("rebind.example", 80)
    assert not decision.allowed and "169.254.169.254" in decision.reason


async def test_a_name_that_does_not_resolve_is_refused() -> None:
    async def failing(name: str, port: int) -> list[Address]:
        raise OSError("Name or service not known")

    decision = await EgressPolicy.from_entries(["nowhere.invalid:80"], resolver=failing).decide(
        "nowhere.invalid", 80
    )
    assert not decision.allowed and "does not resolve" in decision.reason


async def test_hosts_not_listed_are_refused_before_any_resolution() -> None:
    asked: list[str] = []

    async def resolver(name: str, port: int) -> list[Address]:
        asked.append(name)
        return [IP("93.184.216.34")]

    policy = EgressPolicy.from_entries(["api.example.com:443"], resolver=resolver)
    for host in ("evil.example.com", "169.254.169.254", "10.0.0.1", "api.example.com.evil.org"):
        assert not (await policy.decide(host, 443)).allowed
    assert not (await policy.decide("api.example.com", 80)).allowed
    assert asked == []


def test_operator_switch_and_ceiling(caplog: pytest.LogCaptureFixture) -> None:
    entries = ["api.example.com:443", "127.0.0.1:8080"]
    assert sandbox_policy([], EgressSettings()) is None
    on = sandbox_policy(entries, EgressSettings(max_connections=3, connect_timeout_s=2.5))
    assert on is not None and [str(rule) for rule in on.rules] == entries
    assert (on.max_connections, on.connect_timeout_s) == (3, 2.5)
    with caplog.at_level(logging.WARNING):
        assert sandbox_policy(entries, EgressSettings(enabled=False)) is None
        capped = sandbox_policy(entries, EgressSettings(allowed=["api.example.com:443"]))
        assert sandbox_policy(entries, EgressSettings(allowed=["pypi.org:443"])) is None
    assert capped is not None and [str(rule) for rule in capped.rules] == ["api.example.com:443"]
    assert "127.0.0.1:8080" in caplog.text and "switched off" in caplog.text


def test_operator_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GYM_SANDBOX__EGRESS__ENABLED", "false")
    monkeypatch.setenv("GYM_SANDBOX__EGRESS__ALLOWED", '["pypi.org:443"]')
    egress = Settings().sandbox.egress
    assert egress.enabled is False and egress.allowed == ["pypi.org:443"]
    monkeypatch.setenv("GYM_SANDBOX__EGRESS__ALLOWED", '["2130706433:80"]')
    with pytest.raises(ValueError, match="non-canonical"):
        Settings()


def test_an_environment_with_a_bad_entry_fails_at_registration() -> None:
    class Fetcher(Environment):
        name = "fetcher"
        egress: ClassVar[tuple[str, ...]] = ("pypi.org",)

        async def verify(self) -> VerifyResult:
            return VerifyResult(reward=0.0)

    with pytest.raises(EnvironmentDefinitionError, match=r"fetcher.*egress.*host:port"):
        Fetcher.check_definition()
    Fetcher.egress = ("pypi.org:443",)
    Fetcher.check_definition()


def test_an_mcp_manifest_declares_its_servers_egress() -> None:
    server = StdioServer(transport="stdio", command=["python3", "-m", "srv"], egress=["api.example.com:443"])
    assert server.egress == ["api.example.com:443"]
    with pytest.raises(ValueError, match="non-canonical"):
        StdioServer(transport="stdio", command=["srv"], egress=["0x7f.1:80"])
