"""Keys are checked in constant time and never leak: no key, secret or hash in any response or log line.

What the timing test asserts: every check of a well-formed key runs exactly one `hmac.compare_digest`
over two SHA-256 hex digests of equal length, whether the id is known (right or wrong secret) or not
(compared against a dummy digest), so neither the secret nor an id's existence shapes the comparison;
and the key table is only ever looked up by the exact public id (a table that fails on iteration
proves no prefix or linear search happens, whose timing could depend on the key).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from authtest import KeyMaker, bearer
from typer.testing import CliRunner

from gym_server.auth import keys as key_module
from gym_server.auth.keys import hash_secret, split_key
from gym_server.auth.keystore import StoredKey
from gym_server.auth.keytable import KeyTable
from gym_server.cli.main import app as cli

SESSION = {"env": "counter", "task_id": "counter-0000", "seed": 0}


class NoScan(dict[str, StoredKey]):
    """A key table that may be looked up by exact id only."""

    def __iter__(self) -> Any:
        raise AssertionError("the key table was scanned")

    def keys(self) -> Any:
        raise AssertionError("the key table was scanned")

    def values(self) -> Any:
        raise AssertionError("the key table was scanned")

    def items(self) -> Any:
        raise AssertionError("the key table was scanned")


def test_every_check_is_one_constant_time_comparison_of_equal_length_digests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key_id, key, digest = key_module.new_key()
    table = KeyTable("sqlite://", refresh_s=1)
    table._keys = NoScan({key_id: StoredKey("t", frozenset({key_module.Scope.READ}), digest)})
    calls: list[tuple[int, int]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)  # the module the key check calls into
    wrong = key[:-1] + ("A" if key[-1] != "A" else "B")
    unknown = f"gym_{'f' * 12}_{key.split('_', 2)[2]}"
    assert table.verify(key) is not None
    assert table.verify(wrong) is None
    assert table.verify(unknown) is None
    assert calls == [(64, 64)] * 3
    calls.clear()
    assert table.verify("gym_not-a-key") is None  # malformed: refused by its shape, no secret compared
    assert calls == []


async def test_no_key_secret_or_hash_in_any_response_or_log_line(
    secured: Callable[..., Any],
    keys: KeyMaker,
    tenant: Callable[[], str],
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    caplog.set_level(logging.DEBUG)
    name = tenant()
    admin, read, revoked = keys.create(name, "admin"), keys.create(name, "read"), keys.create(name, "read")
    keys.revoke(revoked)
    secrets = []
    for key in (admin, read, revoked):
        parts = split_key(key)
        assert parts is not None
        secrets += [key, parts[1], hash_secret(parts[1])]
    seen: list[httpx.Response] = []
    async with secured() as gym:
        client = gym.client
        for key in (admin, read, revoked, admin[:-2], "gym_x"):
            seen.append(await client.post("/v1/sessions", json=SESSION, headers=bearer(key)))
            seen.append(await client.get("/v1/rollouts", headers=bearer(key)))
            seen.append(await client.get("/metrics", headers=bearer(key)))
            seen.append(await client.post("/ui/login", data={"key": key, "next": "/ui"}))
        session_id = seen[0].json()["session_id"]
        seen.append(await client.get(f"/v1/sessions/{session_id}", headers=bearer(admin)))
        seen.append(await client.get("/openapi.json"))
    listed = CliRunner().invoke(cli, ["keys", "list", "--database-url", keys.url])
    assert listed.exit_code == 0, listed.output
    texts = [f"{r.status_code} {r.headers} {r.text}" for r in seen] + [caplog.text, listed.output]
    texts += [record.getMessage() for record in caplog.records]
    # The flows really ran: a session created, a login made, refusals answered.
    assert {201, 303, 401} <= {r.status_code for r in seen}
    for secret in secrets:
        for text in texts:
            assert secret not in text
