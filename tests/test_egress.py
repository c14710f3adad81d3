"""The policy allow-list: which URLs a prefix lets through, compared as httpx will connect to them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gym_server.core.egress import DEFAULT_POLICY_URLS, refusal
from gym_server.core.settings import Settings

SETTING = "GYM_ROLLOUT_RUNS__POLICY_URLS"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8001",
        "http://127.0.0.1:8001/v1",
        "http://127.0.0.1:8001/v1/",
        "http://localhost:9000",
        "http://LOCALHOST:9000",
        "http://[::1]:8000/v1",
        "http://127.0.0.1",
    ],
)
def test_loopback_is_allowed_by_default(url: str) -> None:
    assert refusal(url, list(DEFAULT_POLICY_URLS), SETTING) is None


_NOT_ALLOWED = "is not an endpoint this server may call"


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://169.254.169.254/latest/meta-data/", _NOT_ALLOWED),  # cloud metadata
        ("http://10.0.0.1/v1", _NOT_ALLOWED),  # a private network
        ("http://127.0.0.1:80@169.254.169.254/", "credentials"),  # userinfo that looks like loopback
        ("http://127.0.0.1.nip.io:8001", _NOT_ALLOWED),  # a name that starts like loopback
        ("http://127.0.0.2:8001", _NOT_ALLOWED),  # loopback, but not an address the operator listed
        ("http://2130706433/", _NOT_ALLOWED),  # 127.0.0.1 as one number: not how the operator wrote it
        ("http://[::ffff:169.254.169.254]/", _NOT_ALLOWED),
        ("https://127.0.0.1:8001", _NOT_ALLOWED),  # another scheme
        ("http://user:key@127.0.0.1:8001", "credentials"),  # a key belongs in api_key
        ("http://127.0.0.1:8001/v1?x=1", "query"),
        ("http://127.0.0.1:8001/v1#f", "fragment"),
        ("file:///etc/passwd", "scheme"),
        ("gopher://127.0.0.1:6379/_", "scheme"),
        ("http:///v1", "no host"),
        ("not a url at all", "scheme"),
    ],
)
def test_everything_else_is_refused_saying_why(url: str, why: str) -> None:
    reason = refusal(url, list(DEFAULT_POLICY_URLS), SETTING)
    assert reason is not None and why in reason
    if why == _NOT_ALLOWED:
        assert SETTING in reason  # the operator's knob, named


def test_a_port_and_a_path_narrow_a_prefix() -> None:
    prefixes = ["http://vllm:8000", "http://gateway/policies/a/"]
    assert refusal("http://vllm:8000/v1", prefixes, SETTING) is None
    assert refusal("http://vllm:8001/v1", prefixes, SETTING) is not None
    assert refusal("http://gateway/policies/a/v1", prefixes, SETTING) is None
    assert refusal("http://gateway/policies/a", prefixes, SETTING) is None
    assert refusal("http://gateway/policies/ab/v1", prefixes, SETTING) is not None
    assert refusal("http://gateway/policies/a/../b", prefixes, SETTING) is not None  # resolved to /policies/b
    assert refusal("http://gateway/policies/a/%2e%2e/b", prefixes, SETTING) is not None
    assert refusal("http://gateway:8080/policies/a", prefixes, SETTING) is None  # no port: any port
    assert refusal("http://vllm:80", ["http://vllm:80"], SETTING) is None
    assert refusal("http://vllm:8000", ["http://vllm:80"], SETTING) is not None


def test_a_prefix_that_cannot_be_matched_stops_the_configuration() -> None:
    for bad in ("ftp://x", "http://u:p@host", "http://host/?q=1", "vllm:8000"):
        with pytest.raises(ValidationError, match="policy_urls"):
            Settings(rollout_runs={"policy_urls": [bad]})
    assert Settings().rollout_runs.policy_urls == list(DEFAULT_POLICY_URLS)
