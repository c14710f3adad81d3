"""Every gym client sends `GYM_API_KEY`, and takes an `api_key` parameter that wins over it: against a
real `gym-server serve` that requires keys, as a trainer on another host meets it."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Iterator

import pytest
from authtest import KeyMaker
from conftest import ServerProcess, free_port

from gym_trainer.client import GymAPIError, GymClient, SyncGymClient
from gym_trainer.trl import GymRolloutFunc, load_gym_dataset, make_environment_factory


@pytest.fixture(scope="module")
def secured_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str, str]]:
    """One server with keys required for the module (starting one costs seconds): (server, key, revoked)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('keys') / 'gym.db'}"
    keys = KeyMaker(url)
    key, revoked = keys.create("acme", "episodes"), keys.create("acme", "episodes")
    keys.revoke(revoked)
    port = free_port()
    env = {**os.environ, "GYM_DATABASE_URL": url, "GYM_AUTH__MODE": "on", "GYM_SERVER_NAME": f"keys-{port}"}
    args = [sys.executable, "-m", "gym_server.cli.main", "serve", "--host", "127.0.0.1", "--port", str(port)]
    server = ServerProcess(url=f"http://127.0.0.1:{port}", env=env, args=args)
    server.start(timeout_s=60)
    try:
        yield server, key, revoked
    finally:
        server.stop()


def _refused(call: Callable[[], object]) -> None:
    with pytest.raises(GymAPIError) as refused:
        call()
    assert refused.value.status == 401


def test_the_clients_read_the_variable_and_the_parameter_wins(
    secured_server: tuple[ServerProcess, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, key, revoked = secured_server
    monkeypatch.delenv("GYM_API_KEY", raising=False)
    with SyncGymClient(server.url) as gym:
        _refused(lambda: gym.tasks("counter", limit=1))
    monkeypatch.setenv("GYM_API_KEY", key)
    with SyncGymClient(server.url) as gym:
        assert gym.tasks("counter", limit=1)["tasks"]
    with SyncGymClient(server.url, api_key="") as gym:  # an empty key: send none
        _refused(lambda: gym.tasks("counter", limit=1))
    monkeypatch.setenv("GYM_API_KEY", revoked)
    with SyncGymClient(server.url, api_key=key) as gym:
        assert gym.tasks("counter", limit=1)["tasks"]

    async def play() -> None:
        async with GymClient(server.url, api_key=key) as client:
            session = await client.create_session("counter", task_id="counter-0000")
            await client.close(session.session_id)

    asyncio.run(play())


def test_the_trl_adapter_sends_the_key(
    secured_server: tuple[ServerProcess, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, key, revoked = secured_server
    monkeypatch.setenv("GYM_API_KEY", key)
    dataset = load_gym_dataset(server.url, "counter", limit=3)
    assert len(dataset) == 3 and dataset[0]["task_id"]
    factory = make_environment_factory(server.url, "counter", run="keys")
    environment = factory()
    environment.reset(task_id="counter-0000")
    assert environment.session_id and environment.failure is None
    assert environment.get_reward() is not None
    rollout = GymRolloutFunc(server.url, env="counter")
    try:
        loop, gym = rollout._connect()
        assert loop.run(gym.tasks("counter", limit=1))["tasks"]
    finally:
        rollout.close()

    monkeypatch.setenv("GYM_API_KEY", revoked)  # the parameters win over the variable
    assert len(load_gym_dataset(server.url, "counter", limit=2, api_key=key)) == 2
    make_environment_factory(server.url, "counter", api_key=key)
    rollout = GymRolloutFunc(server.url, env="counter", api_key=key)
    try:
        loop, gym = rollout._connect()
        assert loop.run(gym.tasks("counter", limit=1))["tasks"]
    finally:
        rollout.close()
    with pytest.raises(GymAPIError):
        load_gym_dataset(server.url, "counter", limit=2)
    assert "api_key" not in repr(GymRolloutFunc(server.url, api_key=key))
