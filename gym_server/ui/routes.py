"""The inspector's pages: runs, trajectories (list and one), compare, live.

Handlers only gather and hand over: reads go through `store.read` with `store.inspector` queries built
from the page's `TrajectoryFilter` (`UiFilterDep`), and templates do the rest. Each response carries a
`Server-Timing` header (`app;dur=<ms>`), the server time the benchmark and the browser's devtools read.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import PlainTextResponse, RedirectResponse
from fastapi.routing import APIRoute
from fastapi.templating import Jinja2Templates

from gym_server.api.deps import ManagerDep, RegistryDep, SettingsDep, StoreDep, TenantDep
from gym_server.core.errors import InvalidRequest, RolloutNotFound
from gym_server.sandbox import runtime as sandbox_runtime
from gym_server.store import inspector
from gym_server.store.records import TrajectoryStatus
from gym_server.store.repository import list_rescores
from gym_server.ui.compare import compare_tasks
from gym_server.ui.filters import UiFilterDep
from gym_server.ui.forks import branches
from gym_server.ui.transcript import (
    HIGHLIGHT_BLOCK_CHARS,
    HIGHLIGHT_PAGE_CHARS,
    HighlightBudget,
    highlight_css,
    render_messages,
    score_changes,
    turn_tokens,
)

__all__ = ["router"]

RUNS_PER_PAGE = 20
TRAJECTORIES_PER_PAGE = 50
CHARTED_RUNS = 5


class TimedRoute(APIRoute):
    """A route whose responses say how long the server spent on them (`Server-Timing: app;dur=...`)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def timed_handler(request: Request) -> Response:
            started = time.perf_counter()
            response = await handler(request)
            response.headers["Server-Timing"] = f"app;dur={(time.perf_counter() - started) * 1000:.1f}"
            return response

        return timed_handler


router = APIRouter(prefix="/ui", tags=["inspector"], route_class=TimedRoute, include_in_schema=False)
templates = Jinja2Templates(directory=Path(__file__).parent / "templates")


def _page(request: Request, name: str, **context: Any) -> Response:
    def query(**changes: Any) -> str:
        """This page's query string with `changes` applied (None removes a parameter): pager links."""
        params = {key: value for key, value in request.query_params.multi_items() if key not in changes}
        params.update({key: value for key, value in changes.items() if value is not None})
        return urlencode(params)

    common = {"statuses": list(TrajectoryStatus), "query": query, "day": timedelta(days=1)}
    return templates.TemplateResponse(request, name, {**common, **context})


@router.get("")
async def home() -> RedirectResponse:
    return RedirectResponse("/ui/runs", status_code=307)


@router.get("/highlight.css")
async def highlight_stylesheet() -> PlainTextResponse:
    return PlainTextResponse(highlight_css(), media_type="text/css")


@router.get("/runs")
async def runs_page(
    request: Request,
    where: UiFilterDep,
    store: StoreDep,
    registry: RegistryDep,
    page: Annotated[int, Query(ge=1, le=100_000)] = 1,
    show: Annotated[list[str] | None, Query(description="runs to chart (the first five count)")] = None,
) -> Response:
    """Runs with their counts, mean reward and success; curves of the charted runs over time."""
    summaries, total = await store.read(
        partial(inspector.run_summaries, where=where, offset=(page - 1) * RUNS_PER_PAGE, limit=RUNS_PER_PAGE)
    )
    charted = [run for run in show or [] if run][:CHARTED_RUNS] or [s.run for s in summaries[:CHARTED_RUNS]]
    curves = await store.read(partial(inspector.curves, where=where, runs=charted))
    return _page(
        request,
        "runs.html",
        where=where,
        summaries=summaries,
        total=total,
        page=page,
        pages=max(1, -(-total // RUNS_PER_PAGE)),
        charted=charted,
        curves=curves,
        envs=sorted(registry.names()),
    )


@router.get("/trajectories")
async def trajectories_page(
    request: Request,
    where: UiFilterDep,
    store: StoreDep,
    registry: RegistryDep,
    after: Annotated[str | None, Query(max_length=400, description="the cursor of the previous page")] = None,
    sort: inspector.TrajectorySort = "newest",
) -> Response:
    """Trajectories matching the filter, newest first or by reward, paged by keyset."""
    try:
        cursor = inspector.PageCursor.parse(after) if after else None
        rows, next_cursor = await store.read(
            partial(
                inspector.trajectory_page, where=where, after=cursor, limit=TRAJECTORIES_PER_PAGE, sort=sort
            )
        )
    except ValueError as exc:
        raise InvalidRequest(f"after: {exc}") from None
    return _page(
        request,
        "trajectories.html",
        where=where,
        rows=rows,
        next_after=None if next_cursor is None else next_cursor.token(),
        first_page=cursor is None,
        envs=sorted(registry.names()),
        sort=sort,
    )


@router.get("/trajectories/{trajectory_id}")
async def trajectory_page(
    request: Request, trajectory_id: str, where: UiFilterDep, store: StoreDep
) -> Response:
    """One trajectory: transcript, tokens per turn, reward components, lineage and re-score history."""
    record = await store.read(partial(inspector.find_trajectory, where=where, trajectory_id=trajectory_id))
    if record is None:
        raise RolloutNotFound(trajectory_id)
    rescores = await store.read(partial(list_rescores, trajectory_id=trajectory_id))
    forks = await store.read(partial(inspector.forks_of, where=where, trajectory_id=trajectory_id))

    def render() -> Response:
        budget = HighlightBudget()
        messages = render_messages(record.messages, budget)
        return _page(
            request,
            "trajectory.html",
            record=record,
            messages=messages,
            plain_blocks=budget.plain,
            highlight_limits=(HIGHLIGHT_BLOCK_CHARS, HIGHLIGHT_PAGE_CHARS),
            tokens=turn_tokens(record.turns),
            changes=score_changes(rescores),
            forks=forks,
        )

    # Off the loop: a transcript may hold 8 MiB (escaping, folding, the capped highlighting, the template).
    return await asyncio.to_thread(render)


@router.get("/trajectories/{trajectory_id}/forks")
async def forks_page(request: Request, trajectory_id: str, where: UiFilterDep, store: StoreDep) -> Response:
    """An episode's forks as a tree: for each turn forked at, the continuations side by side from there."""
    record = await store.read(partial(inspector.find_trajectory, where=where, trajectory_id=trajectory_id))
    if record is None:
        raise RolloutNotFound(trajectory_id)
    forks = await store.read(partial(inspector.forks_of, where=where, trajectory_id=trajectory_id))

    def render() -> Response:
        budget = HighlightBudget()
        return _page(request, "forks.html", record=record, branches=branches(record, forks, budget))

    return await asyncio.to_thread(render)


@router.get("/compare")
async def compare_page(
    request: Request,
    where: UiFilterDep,
    store: StoreDep,
    a: Annotated[str | None, Query(max_length=256)] = None,
    b: Annotated[str | None, Query(max_length=256)] = None,
    by: Literal["run", "policy"] = "run",
) -> Response:
    """Two runs (or two policies) on the tasks both attempted: reward per task, better and worse.

    Each side is picked from the runs (or policy models) in the store, most recently active first, so a
    comparison never starts from a mistyped name; a name given in the URL stays selectable.
    """
    comparison = None
    if a and b:
        side_a = await store.read(partial(inspector.task_rewards, where=where.model_copy(update={by: a})))
        side_b = await store.read(partial(inspector.task_rewards, where=where.model_copy(update={by: b})))
        comparison = compare_tasks(side_a, side_b)
    scope = where.model_copy(update={by: None})
    choices = await store.read(partial(inspector.compare_choices, where=scope, by=by))
    return _page(
        request,
        "compare.html",
        where=where,
        a=a or "",
        b=b or "",
        by=by,
        comparison=comparison,
        choices=choices,
    )


@router.get("/live")
async def live_page(
    request: Request, manager: ManagerDep, store: StoreDep, settings: SettingsDep, tenant: TenantDep
) -> Response:
    """Open sessions per environment against capacity, the sandbox pool and the trajectory writer.

    With keys on, the sessions listed per environment are the tenant's own; the count against capacity,
    the sandboxes and the writer are the server's, which every tenant shares.
    """
    sandbox = await sandbox_runtime.health()
    return _page(
        request,
        "live.html",
        by_env=sorted(manager.live_by_env(tenant).items()),
        tenant=tenant,
        live=manager.live_count,
        capacity=settings.sessions.max_sessions,
        sandbox=sandbox,
        writer={
            "pending": store.pending,
            "written": store.written,
            "dropped": store.dropped,
            "healthy": store.healthy,
            "last_error": store.last_error,
        },
    )
