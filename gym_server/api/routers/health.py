"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gym_server.api.deps import ManagerDep, StoreDep
from gym_server.core.problems import problem
from gym_server.sandbox import runtime as sandbox_runtime

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness: the process answers")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="Readiness: the database and the sandbox backend answer",
    description=(
        "200 when the database answers, the trajectory writer commits, and the sandbox backend chosen at "
        "start-up still can make sandboxes "
        "(Docker: the engine answers; bubblewrap: it can still create namespaces). `sandbox.state` is `none` "
        "when `auto` found no backend at start-up: the server is ready for environments that run no code. "
        "The sandbox probe is cached for two seconds. Otherwise 503 problem+json naming what is down."
    ),
    responses={503: {"description": "the database or the sandbox backend is down"}},
)
async def readyz(store: StoreDep, manager: ManagerDep) -> Any:
    sandbox, database_ok = await asyncio.gather(sandbox_runtime.health(), store.ping())
    failing: dict[str, str] = {}
    if not database_ok:
        failing["database"] = f"unreachable: {store.last_error or 'no answer'}"
    if not store.healthy:
        # Reads may still work (SQLite readers beside a writer's lock, say), yet nothing acknowledged can
        # be committed: a balancer must stop sending episodes here.
        failing["writer"] = f"failing with {store.pending} rows waiting: {store.last_error}"
    if not sandbox.ready:
        failing["sandbox"] = f"{sandbox.backend} {sandbox.state}: {sandbox.detail}"
    checks = {"database": "ok", "sandbox": sandbox.state, **failing}
    if not failing:
        return {
            "status": "ready",
            "checks": checks,
            "sandbox": sandbox.as_dict(),
            "live_sessions": manager.live_count,
        }
    detail = "; ".join(f"{name} {value}" for name, value in failing.items())
    return problem(
        503,
        "not-ready",
        "Not ready",
        detail,
        checks=checks,
        sandbox=sandbox.as_dict(),
        headers={"Retry-After": "5"},
    )


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def metrics(request: Request, manager: ManagerDep, store: StoreDep) -> Response:
    manager.metrics.store_pending.set(store.pending)
    return Response(generate_latest(manager.metrics.registry), media_type=CONTENT_TYPE_LATEST)
