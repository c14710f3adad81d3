"""`SyncGymClient`: the blocking twin of `GymClient`, for scripts and notebooks."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from gym_trainer._loop import BackgroundLoop
from gym_trainer.client.async_client import GymClient
from gym_trainer.client.records import (
    EnvironmentInfo,
    ForkInfo,
    SessionInfo,
    StepResult,
    VerifyResult,
)

__all__ = ["SyncGymClient"]

T = TypeVar("T")


class SyncGymClient:
    """Runs a `GymClient` on a private event loop in a daemon thread, so it also works inside a caller
    that already has a running loop (Jupyter), where `asyncio.run` would fail."""

    def __init__(self, base_url: str | Sequence[str] = "http://127.0.0.1:8000", **kwargs: Any) -> None:
        self._loop = BackgroundLoop()
        self.aclient: GymClient = self._loop.run(_build(base_url, kwargs))

    def __repr__(self) -> str:
        return f"Sync{self.aclient!r}"

    def __enter__(self) -> SyncGymClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close_client()

    def close_client(self) -> None:
        if self._loop.running:
            self._loop.run(self.aclient.aclose())
            self._loop.stop()

    def _call(self, factory: Callable[[], Awaitable[T]]) -> T:
        async def runner() -> T:
            return await factory()

        return self._loop.run(runner())

    def list_environments(self) -> list[EnvironmentInfo]:
        return self._call(self.aclient.list_environments)

    def get_environment(self, env: str) -> EnvironmentInfo:
        return self._call(lambda: self.aclient.get_environment(env))

    def tasks(self, env: str, **kwargs: Any) -> dict[str, Any]:
        return self._call(lambda: self.aclient.tasks(env, **kwargs))

    def all_tasks(self, env: str, **kwargs: Any) -> list[dict[str, Any]]:
        return self._call(lambda: self.aclient.all_tasks(env, **kwargs))

    def curriculum(self, env: str, **kwargs: Any) -> dict[str, Any]:
        return self._call(lambda: self.aclient.curriculum(env, **kwargs))

    def create_session(self, env: str, **kwargs: Any) -> SessionInfo:
        return self._call(lambda: self.aclient.create_session(env, **kwargs))

    def fork(self, session_id: str, turn: int, n: int = 1, **kwargs: Any) -> ForkInfo:
        return self._call(lambda: self.aclient.fork(session_id, turn, n, **kwargs))

    def step(
        self, session_id: str, message: dict[str, Any], turn_data: dict[str, Any] | None = None
    ) -> StepResult:
        return self._call(lambda: self.aclient.step(session_id, message, turn_data))

    def record_truncated_turn(
        self, session_id: str, content: str, turn_data: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return self._call(lambda: self.aclient.record_truncated_turn(session_id, content, turn_data))

    def verify(self, session_id: str) -> VerifyResult:
        return self._call(lambda: self.aclient.verify(session_id))

    def get_session(self, session_id: str) -> dict[str, Any]:
        return self._call(lambda: self.aclient.get_session(session_id))

    def close(self, session_id: str, *, failure: str | None = None) -> None:
        self._call(lambda: self.aclient.close(session_id, failure=failure))

    def verify_stateless(self, env: str, **kwargs: Any) -> VerifyResult:
        return self._call(lambda: self.aclient.verify_stateless(env, **kwargs))

    def verify_batch(self, items: list[dict[str, Any]]) -> list[VerifyResult | dict[str, Any]]:
        return self._call(lambda: self.aclient.verify_batch(items))

    def list_rollouts(self, **filters: Any) -> dict[str, Any]:
        return self._call(lambda: self.aclient.list_rollouts(**filters))

    def get_rollout(self, rollout_id: str) -> dict[str, Any]:
        return self._call(lambda: self.aclient.get_rollout(rollout_id))


async def _build(base_url: str | Sequence[str], kwargs: dict[str, Any]) -> GymClient:
    # Built on the background loop so its connection pool belongs to that loop.
    return GymClient(base_url, **kwargs)
