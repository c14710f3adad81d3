"""FastAPI dependencies: the long-lived objects built once in the app's lifespan, as `Annotated` aliases.

Tests swap any of them with `app.dependency_overrides`.
"""

from __future__ import annotations

from typing import Annotated, cast

from fastapi import Depends, Request

from gym_server.core.settings import Settings
from gym_server.sdk.registry import Registry
from gym_server.sessions.manager import SessionManager
from gym_server.sessions.policy_runs import PolicyRuns
from gym_server.sessions.rollout_runs import RolloutRunBoard
from gym_server.store.writer import TrajectoryStore

__all__ = [
    "ManagerDep",
    "PolicyRunsDep",
    "RegistryDep",
    "RunBoardDep",
    "SettingsDep",
    "StoreDep",
    "TenantDep",
]


# `async def` on purpose: FastAPI runs plain-def dependencies in a worker thread, a hop per request.
async def get_settings(request: Request) -> Settings:
    return cast(Settings, request.app.state.settings)


async def get_registry(request: Request) -> Registry:
    return cast(Registry, request.app.state.registry)


async def get_manager(request: Request) -> SessionManager:
    return cast(SessionManager, request.app.state.manager)


async def get_store(request: Request) -> TrajectoryStore:
    return cast(TrajectoryStore, request.app.state.store)


async def get_run_board(request: Request) -> RolloutRunBoard:
    return cast(RolloutRunBoard, request.app.state.rollout_runs)


async def get_policy_runs(request: Request) -> PolicyRuns:
    return cast(PolicyRuns, request.app.state.policy_runs)


async def get_tenant(request: Request) -> str | None:
    """The tenant whose objects this request may see; None with authentication off (all of them)."""
    principal = getattr(request.state, "principal", None)  # set by gym_server.auth.middleware
    return None if principal is None else cast(str, principal.tenant)


SettingsDep = Annotated[Settings, Depends(get_settings)]
RegistryDep = Annotated[Registry, Depends(get_registry)]
ManagerDep = Annotated[SessionManager, Depends(get_manager)]
StoreDep = Annotated[TrajectoryStore, Depends(get_store)]
RunBoardDep = Annotated[RolloutRunBoard, Depends(get_run_board)]
PolicyRunsDep = Annotated[PolicyRuns, Depends(get_policy_runs)]
TenantDep = Annotated[str | None, Depends(get_tenant)]
