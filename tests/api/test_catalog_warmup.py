"""`GYM_CATALOG_WARMUP`: each environment's first-use work done at start-up (before the server listens,
or in a thread after), or left to first use. The suite runs with `off` (tests/conftest.py); here each mode
is named explicitly."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from conftest import make_settings

from gym_env_counter.env import CounterEnv
from gym_server import Registry
from gym_server.app import create_app


class WatchedRegistry(Registry):
    """A registry that notes the threads its warm-up ran on."""

    def __init__(self) -> None:
        super().__init__([CounterEnv])
        self.warmed_on: list[str] = []
        self.done = threading.Event()

    def warm(self, stop: threading.Event | None = None) -> None:
        self.warmed_on.append(threading.current_thread().name)
        super().warm(stop)
        self.done.set()


@pytest.mark.parametrize("mode", ["before_serving", "background"])
async def test_the_warm_up_runs_at_start_off_the_event_loop(tmp_path: Path, mode: str) -> None:
    registry = WatchedRegistry()
    app = create_app(make_settings(f"sqlite:///{tmp_path / 'gym.db'}", catalog_warmup=mode), registry)
    loop_thread = threading.current_thread().name
    async with app.router.lifespan_context(app):
        if mode == "before_serving":
            assert registry.done.is_set()  # done before the app would take a request
        else:
            assert await asyncio.to_thread(registry.done.wait, 60)
    assert len(registry.warmed_on) == 1 and registry.warmed_on[0] != loop_thread


async def test_off_leaves_the_work_to_first_use(tmp_path: Path) -> None:
    registry = WatchedRegistry()
    app = create_app(make_settings(f"sqlite:///{tmp_path / 'gym.db'}", catalog_warmup="off"), registry)
    async with app.router.lifespan_context(app):
        pass
    assert registry.warmed_on == []
