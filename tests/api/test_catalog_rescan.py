"""An environment installed while the server runs is found without a restart (gym_server/sessions/catalog.py):
a distribution's dist-info with a `gym_server.environments` entry point written onto sys.path after the
app started, then a session of it created; and the scan a miss starts is rate-limited."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest
from conftest import serving

from gym_server.core.errors import EnvironmentNotFound
from gym_server.sdk.registry import Registry
from gym_server.sessions.catalog import CatalogRescan


def install_plugin(site: Path, module: str, env: str) -> None:
    """What `pip install` leaves in site-packages: the module and its dist-info with the entry point."""
    (site / f"{module}.py").write_text(
        textwrap.dedent(
            f"""
            from gym_env_counter.env import CounterEnv


            class LateCounter(CounterEnv):
                name = {env!r}
                dataset_name = "counter"
            """
        )
    )
    info = site / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[gym_server.environments]\n{env} = {module}:LateCounter\n")


async def test_an_environment_installed_while_the_server_runs_is_served_without_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site-packages"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))  # an empty folder on sys.path, as site-packages before the install
    body = {"env": "late_counter", "task_id": "counter-0000", "seed": 0}
    async with serving(tmp_path) as gym:
        listed = (await gym.client.get("/v1/environments")).json()["environments"]
        assert "late_counter" not in {env["name"] for env in listed}
        install_plugin(site, "late_counter_plugin", "late_counter")

        created = await gym.client.post("/v1/sessions", json=body)
        assert created.status_code == 201, created.text
        assert created.json()["env"] == "late_counter"
        described = await gym.client.get("/v1/environments/late_counter")
        assert described.status_code == 200 and described.json()["name"] == "late_counter"
        listed = (await gym.client.get("/v1/environments")).json()["environments"]
        assert "late_counter" in {env["name"] for env in listed}


async def test_a_miss_scans_at_most_once_per_interval_and_concurrent_misses_share_the_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site-packages"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    now = [100.0]
    catalog = CatalogRescan(Registry.discover(), interval_s=5.0, clock=lambda: now[0])

    misses = await asyncio.gather(*(catalog.entry("later_counter") for _ in range(3)), return_exceptions=True)
    assert all(isinstance(miss, EnvironmentNotFound) for miss in misses)
    assert catalog.scans == 1  # three misses at once, one scan

    install_plugin(site, "later_counter_plugin", "later_counter")
    now[0] += 4.9  # within the interval: answered 404 at once, no scan
    with pytest.raises(EnvironmentNotFound):
        await catalog.entry("later_counter")
    assert catalog.scans == 1

    now[0] += 0.2  # past it: the next miss scans and finds it
    assert (await catalog.entry("later_counter")).name == "later_counter"
    assert catalog.scans == 2
    assert (await catalog.entry("later_counter")).name == "later_counter"  # known now: no scan
    assert catalog.scans == 2
