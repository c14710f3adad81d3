"""`gym-server serve --ray` refuses what cannot work before it touches Ray: a store that is not PostgreSQL
(every replica writes to it) and malformed scaling options; with Ray missing it names the extra. The Ray
cluster itself is tested in tests/interop/ray/."""

from __future__ import annotations

import importlib.util

import pytest
from typer.testing import CliRunner

from gym_server.cli.main import app

runner = CliRunner()
POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/never_used"


def test_ray_needs_postgresql() -> None:
    result = runner.invoke(app, ["serve", "--ray", "--database-url", "sqlite:///x.db"], terminal_width=200)
    assert result.exit_code == 2
    assert "--ray needs one PostgreSQL" in result.output


def test_ray_with_or_without_an_address() -> None:
    # The bare flag and an address both parse; the bad JSON then stops it before any connection.
    for argv in (["--ray"], ["--ray", "--ray-address", "10.0.0.1:6379"]):
        result = runner.invoke(
            app,
            ["serve", *argv, "--database-url", POSTGRES, "--replica-resources", "{not json"],
            terminal_width=200,
        )
        assert result.exit_code == 2, result.output
        expected = "needs Ray" if importlib.util.find_spec("ray") is None else "invalid --ray options"
        assert expected in result.output


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="the bounds are checked once Ray imports")
def test_max_replicas_below_min_is_refused() -> None:
    result = runner.invoke(
        app,
        ["serve", "--ray", "--database-url", POSTGRES, "--workers", "3", "--max-workers", "2"],
        terminal_width=200,
    )
    assert result.exit_code == 2
    assert "max_replicas (2) < min_replicas (3)" in result.output
