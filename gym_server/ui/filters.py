"""The inspector's one source of `TrajectoryFilter`: the filter form's query parameters, as a dependency.

Every page takes its filter from `UiFilterDep`, so whatever must scope every read of the inspector is
added in `inspector_filter`, once: the request's tenant (None with keys off, every tenant).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from typing import Annotated

from fastapi import Depends, Query

from gym_server.api.deps import TenantDep
from gym_server.core.errors import InvalidRequest
from gym_server.store.records import TrajectoryStatus
from gym_server.store.repository import TrajectoryFilter

__all__ = ["UiFilterDep", "inspector_filter"]

_Name = Annotated[str | None, Query(max_length=256)]


def _blank_is_none(value: str | None) -> str | None:
    """An HTML form sends an empty field as `name=`: that means no filter, not 'equal to empty'."""
    return value.strip() or None if value is not None else None


def _day(value: str | None, field: str) -> date | None:
    text = _blank_is_none(value)
    if text is None:
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise InvalidRequest(f"{field} must be a date as YYYY-MM-DD, got {text!r}") from None


def _version(value: str | None, field: str) -> int | None:
    text = _blank_is_none(value)
    if text is None:
        return None
    if not (text.isdecimal() and text.isascii()):
        raise InvalidRequest(f"{field} must be a policy version (a whole number >= 0), got {text!r}")
    return int(text)


async def inspector_filter(
    tenant: TenantDep,
    run: _Name = None,
    env: _Name = None,
    env_version: _Name = None,
    verifier_version: _Name = None,
    policy: _Name = None,
    task_id: _Name = None,
    status: Annotated[str | None, Query(max_length=32)] = None,
    since: Annotated[str | None, Query(max_length=32, description="first day, YYYY-MM-DD (UTC)")] = None,
    until: Annotated[str | None, Query(max_length=32, description="last day, YYYY-MM-DD (UTC)")] = None,
    min_version: Annotated[str | None, Query(max_length=20, description="every call at or after it")] = None,
    max_version: Annotated[str | None, Query(max_length=20, description="every call at or before it")] = None,
) -> TrajectoryFilter:
    """The filter the inspector's form describes; `until` includes its whole day."""
    first, last = _day(since, "since"), _day(until, "until")
    status_name = _blank_is_none(status)
    if status_name is not None and status_name not in TrajectoryStatus.__members__.values():
        known = ", ".join(TrajectoryStatus)
        raise InvalidRequest(f"status must be one of {known}, got {status_name!r}")
    return TrajectoryFilter(
        tenant=tenant,
        run=_blank_is_none(run),
        env=_blank_is_none(env),
        env_version=_blank_is_none(env_version),
        verifier_version=_blank_is_none(verifier_version),
        policy=_blank_is_none(policy),
        task_id=_blank_is_none(task_id),
        status=None if status_name is None else TrajectoryStatus(status_name),
        created_from=None if first is None else datetime.combine(first, time(), UTC),
        created_to=None if last is None else datetime.combine(last + timedelta(days=1), time(), UTC),
        min_version=_version(min_version, "min_version"),
        max_version=_version(max_version, "max_version"),
    )


UiFilterDep = Annotated[TrajectoryFilter, Depends(inspector_filter)]
