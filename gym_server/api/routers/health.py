"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gym_server.api.deps import ManagerDep, StoreDep
from gym_server.api.errors import problem

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness: the process answers")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="Readiness: the database (and sandbox, when configured) answer",
    responses={503: {"description": "a backend is down"}},
)
async def readyz(store: StoreDep, manager: ManagerDep) -> Any:
    checks = {"database": "ok" if await store.ping() else f"unreachable: {store.last_error or 'no answer'}"}
    if store.pending > 10 * manager.settings.store.batch_size and not store.healthy:
        checks["writer"] = f"{store.pending} rows waiting: {store.last_error}"
    if all(value == "ok" for value in checks.values()):
        return {"status": "ready", "checks": checks, "live_sessions": manager.live_count}
    failing = ", ".join(f"{name} {value}" for name, value in checks.items() if value != "ok")
    return problem(503, "not-ready", "Not ready", failing, checks=checks, headers={"Retry-After": "5"})


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def metrics(request: Request, manager: ManagerDep, store: StoreDep) -> Response:
    manager.metrics.store_pending.set(store.pending)
    return Response(generate_latest(manager.metrics.registry), media_type=CONTENT_TYPE_LATEST)
