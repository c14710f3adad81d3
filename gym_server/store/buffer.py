"""The rollout buffer's state changes: announcing versions, admitting groups, handing them out, acknowledging.

Every function here runs inside one transaction the caller owns and commits (`StoreQueries.read`), and
each starts by locking its policy run's row (`_lock_run`: an UPDATE, which on SQLite takes the write
lock at once instead of failing to upgrade a read, and on PostgreSQL locks the row), so the changes of
one run are serial: two pulls never hand out the same group, two admissions never both take the last
place. A 2xx is sent after the commit, so what a client was told survives a kill -9 of the server.

A group is `open` from its admission until `size` of its episodes (trajectories whose
`metadata.buffer_group` is its id) have finished, then `ready`; a pull leases ready groups (`leased`),
an acknowledgement consumes them (`consumed`). A group whose oldest call (or, before it has one, its
admission) is more than `max_staleness` versions behind the run's version is marked `stale` whenever the
run is touched: kept, never handed out. A lease that expires unacknowledged gives its groups back
(at-least-once), unless they went stale meanwhile. docs/rollout-buffer.md has the reasoning.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import CursorResult, Result, Row, and_, func, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from gym_server.core.errors import (
    BufferFull,
    LeaseExpired,
    LeaseNotFound,
    PolicyRunNotFound,
    VersionBackwards,
)
from gym_server.store.models import (
    BufferGroup,
    BufferLease,
    PolicyRun,
    PolicyVersion,
    trajectories_table,
)
from gym_server.store.records import TrajectoryRecord, TrajectoryStatus, utcnow
from gym_server.store.repository import row_to_record

__all__ = [
    "Acknowledgement",
    "Announcement",
    "GroupState",
    "HandedGroup",
    "Handout",
    "RunState",
    "acknowledge",
    "admit_group",
    "announce",
    "pull",
    "run_state",
]


class GroupState(StrEnum):
    """Where a buffer group is."""

    OPEN = "open"  # admitted; fewer than `size` of its episodes have finished
    READY = "ready"  # complete and scored, waiting for a pull
    LEASED = "leased"  # handed out, not yet acknowledged
    CONSUMED = "consumed"  # acknowledged by the trainer: handed out for good
    STALE = "stale"  # too far behind the run's version: kept, never handed out


_COUNTED = (GroupState.OPEN, GroupState.READY, GroupState.LEASED, GroupState.CONSUMED)


class Announcement(BaseModel):
    """What a trainer says about its run: the version now sampled, and optionally the buffer's shape."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"version": 3, "max_staleness": 1, "groups_per_step": 4}]},
    )

    version: int = Field(ge=0, description="the policy version now served; never lower than the last one")
    policy: str | None = Field(None, description="the policy's model name, for people reading the run")
    max_staleness: int | None = Field(None, ge=0, description="k; 0 at creation when not given")
    groups_per_step: int | None = Field(None, ge=1, description="groups one trainer step consumes")


class RunState(BaseModel):
    """A policy run as the buffer sees it."""

    run: str
    policy: str | None
    version: int
    first_version: int
    max_staleness: int
    groups_per_step: int | None
    admit_limit: int | None = Field(
        description="groups that may be admitted while the run is at this version (stale ones not "
        "counted): (version - first_version + max_staleness + 1) * groups_per_step; null: no throttle"
    )
    groups: dict[str, int] = Field(description="groups per state")
    created_at: datetime
    updated_at: datetime


class HandedGroup(BaseModel):
    """One group of a pull: its finished episodes, whole."""

    group_id: str
    env: str | None
    task_id: str | None
    version_min: int | None
    version_max: int | None
    deliveries: int = Field(description="1 the first time; more when an earlier lease expired")
    episodes: list[TrajectoryRecord]


class Acknowledgement(BaseModel):
    """What an acknowledgement consumed: fewer than were handed out when the lease had expired and a
    later pull took some groups, or the bound marked them stale."""

    lease_id: str
    consumed: int
    handed_out: int


class Handout(BaseModel):
    """A pull's answer: the groups leased to the caller until `expires_at` (empty when none was ready)."""

    lease_id: str | None = Field(description="acknowledge it to consume the groups; null when none")
    version: int
    max_staleness: int
    expires_at: datetime | None
    groups: list[HandedGroup]


def announce(session: Session, tenant: str, run: str, said: Announcement) -> RunState:
    """Make `said.version` the run's version (creating the run at its first announcement), apply the
    buffer's shape when given, and mark the groups now too stale.

    Raises:
        VersionBackwards: the version is lower than the one announced last (equal is a harmless repeat).
    """
    now = utcnow()
    row = _lock_run(session, tenant, run, create=said)
    if said.version < row.version:
        raise VersionBackwards(run, said.version, row.version)
    changes: dict[str, Any] = {"updated_at": now}
    if said.version > row.version:
        changes["version"] = said.version
    for field in ("policy", "max_staleness", "groups_per_step"):
        value = getattr(said, field)
        if value is not None:
            changes[field] = value
    session.execute(update(PolicyRun).where(*_run_key(tenant, run)).values(**changes))
    if said.version > row.version:
        session.execute(
            insert(PolicyVersion).values(tenant=tenant, run=run, version=said.version, announced_at=now)
        )
    row = _run_row(session, tenant, run)
    _complete_groups(session, row)
    _mark_stale(session, row, now)
    return _state(session, row)


def run_state(session: Session, tenant: str, run: str) -> RunState:
    """The run as it stands (read only).

    Raises:
        PolicyRunNotFound: the run was never announced.
    """
    row = session.execute(select(PolicyRun.__table__).where(*_run_key(tenant, run))).first()
    if row is None:
        raise PolicyRunNotFound(run)
    return _state(session, row)


def admit_group(
    session: Session, tenant: str, run: str, *, size: int, env: str | None, task_id: str | None
) -> tuple[str, int]:
    """Admit one more group to be played for `run`; returns its id and the run's version.

    Raises:
        PolicyRunNotFound: the run was never announced.
        BufferFull: the run has as many groups as its bound allows at this version (a 429).
    """
    now = utcnow()
    row = _lock_run(session, tenant, run)
    _complete_groups(session, row)
    _mark_stale(session, row, now)
    limit = _admit_limit(row)
    if limit is not None:
        counted = session.execute(
            select(func.count())
            .select_from(BufferGroup)
            .where(*_group_key(tenant, run), BufferGroup.state.in_(_COUNTED))
        ).scalar_one()
        if counted >= limit:
            raise BufferFull(run, row.version, limit)
    group_id = uuid.uuid4().hex
    session.execute(
        insert(BufferGroup).values(
            id=group_id,
            tenant=tenant,
            run=run,
            env=env,
            task_id=task_id,
            size=size,
            state=GroupState.OPEN.value,
            admitted_version=row.version,
            deliveries=0,
            created_at=now,
        )
    )
    return group_id, row.version


def pull(
    session: Session, tenant: str, run: str, *, max_groups: int, lease_s: float, min_groups: int = 1
) -> Handout:
    """Lease up to `max_groups` ready groups, oldest first, after finding which open groups finished and
    marking the too stale ones; fewer than `min_groups` ready: lease none.

    Raises:
        PolicyRunNotFound: the run was never announced.
    """
    now = utcnow()
    row = _lock_run(session, tenant, run)
    _complete_groups(session, row)
    _mark_stale(session, row, now)
    groups = BufferGroup.__table__.c
    handable = or_(
        groups.state == GroupState.READY.value,
        and_(groups.state == GroupState.LEASED.value, groups.lease_id.in_(_expired_leases(tenant, run, now))),
    )
    chosen = (
        session.execute(
            select(groups.id)
            .where(*_group_key(tenant, run), handable)
            .order_by(groups.created_at)
            .limit(max_groups)
        )
        .scalars()
        .all()
    )
    handout = Handout(
        lease_id=None, version=row.version, max_staleness=row.max_staleness, expires_at=None, groups=[]
    )
    if not chosen or len(chosen) < min_groups:
        return handout
    lease_id = uuid.uuid4().hex
    expires = now + timedelta(seconds=lease_s)
    session.execute(
        insert(BufferLease).values(
            id=lease_id,
            tenant=tenant,
            run=run,
            version=row.version,
            groups=len(chosen),
            created_at=now,
            expires_at=expires,
        )
    )
    session.execute(
        update(BufferGroup)
        .where(groups.id.in_(chosen))
        .values(state=GroupState.LEASED.value, lease_id=lease_id, deliveries=groups.deliveries + 1)
    )
    handout.lease_id, handout.expires_at = lease_id, expires
    handout.groups = _handed(session, tenant, run, chosen)
    return handout


def acknowledge(session: Session, tenant: str, run: str, lease_id: str) -> Acknowledgement:
    """Consume the groups a lease still holds. Repeating it is harmless; a late acknowledgement (past
    `expires_at`) consumes what no later pull took and the bound did not mark stale meanwhile.

    Raises:
        PolicyRunNotFound: the run was never announced.
        LeaseNotFound: the run never handed out this lease.
        LeaseExpired: the lease expired and holds none of its groups any more.
    """
    now = utcnow()
    _lock_run(session, tenant, run)
    lease = session.execute(
        select(BufferLease.__table__).where(
            BufferLease.id == lease_id, BufferLease.tenant == tenant, BufferLease.run == run
        )
    ).first()
    if lease is None:
        raise LeaseNotFound(run, lease_id)
    groups = BufferGroup.__table__.c
    held = groups.lease_id == lease_id, groups.state.in_((GroupState.LEASED.value, GroupState.CONSUMED.value))
    kept = session.execute(select(func.count()).select_from(BufferGroup).where(*held)).scalar_one()
    if kept == 0:
        raise LeaseExpired(run, lease_id)
    session.execute(
        update(BufferGroup)
        .where(groups.lease_id == lease_id, groups.state == GroupState.LEASED.value)
        .values(state=GroupState.CONSUMED.value, finished_at=now)
    )
    if lease.acknowledged_at is None:
        session.execute(update(BufferLease).where(BufferLease.id == lease_id).values(acknowledged_at=now))
    return Acknowledgement(lease_id=lease_id, consumed=int(kept), handed_out=lease.groups)


# -- helpers ---------------------------------------------------------------------------------------------


def _run_key(tenant: str, run: str) -> tuple[Any, Any]:
    return PolicyRun.tenant == tenant, PolicyRun.run == run


def _group_key(tenant: str, run: str) -> tuple[Any, Any]:
    return BufferGroup.tenant == tenant, BufferGroup.run == run


def _run_row(session: Session, tenant: str, run: str) -> Row[Any]:
    return session.execute(select(PolicyRun.__table__).where(*_run_key(tenant, run))).one()


def _lock_run(session: Session, tenant: str, run: str, create: Announcement | None = None) -> Row[Any]:
    """The run's row, locked for this transaction (see the module docstring); created from `create`
    when it does not exist yet.

    Raises:
        PolicyRunNotFound: it does not exist and `create` is None.
    """
    touched = _rowcount(
        session.execute(
            update(PolicyRun).where(*_run_key(tenant, run)).values(updated_at=PolicyRun.updated_at)
        )
    )
    if not touched:
        if create is None:
            raise PolicyRunNotFound(run)
        _create_run(session, tenant, run, create)
    return _run_row(session, tenant, run)


def _create_run(session: Session, tenant: str, run: str, said: Announcement) -> None:
    """Insert the run and its first version; a concurrent first announcement (PostgreSQL: SQLite writes
    one at a time) that made it first wins, and this one then locks that row."""
    now = utcnow()
    values = {
        "tenant": tenant,
        "run": run,
        "policy": said.policy,
        "version": said.version,
        "first_version": said.version,
        "max_staleness": said.max_staleness or 0,
        "groups_per_step": said.groups_per_step,
        "created_at": now,
        "updated_at": now,
    }
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    made = _rowcount(session.execute(dialect.insert(PolicyRun).values(**values).on_conflict_do_nothing()))
    if made:
        session.execute(
            insert(PolicyVersion).values(tenant=tenant, run=run, version=said.version, announced_at=now)
        )
    else:
        session.execute(
            update(PolicyRun).where(*_run_key(tenant, run)).values(updated_at=PolicyRun.updated_at)
        )


def _state(session: Session, row: Row[Any]) -> RunState:
    groups = BufferGroup.__table__.c
    counted = session.execute(
        select(groups.state, func.count()).where(*_group_key(row.tenant, row.run)).group_by(groups.state)
    )
    counts: dict[str, int] = {state: int(count) for state, count in counted}
    return RunState(
        run=row.run,
        policy=row.policy,
        version=row.version,
        first_version=row.first_version,
        max_staleness=row.max_staleness,
        groups_per_step=row.groups_per_step,
        admit_limit=_admit_limit(row),
        groups={state.value: int(counts.get(state.value, 0)) for state in GroupState},
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _rowcount(result: Result[Any]) -> int:
    """The rows an UPDATE or INSERT matched (an ORM session's `execute` is typed as a plain `Result`)."""
    return int(cast(CursorResult[Any], result).rowcount)


def _admit_limit(row: Row[Any]) -> int | None:
    if row.groups_per_step is None:
        return None
    return int((row.version - row.first_version + row.max_staleness + 1) * row.groups_per_step)


def _expired_leases(tenant: str, run: str, now: datetime) -> Any:
    leases = BufferLease.__table__.c
    return select(leases.id).where(
        leases.tenant == tenant, leases.run == run, leases.acknowledged_at.is_(None), leases.expires_at <= now
    )


def _mark_stale(session: Session, row: Row[Any], now: datetime) -> None:
    """Mark every group of the run that could still be handed out but is older than the bound."""
    groups = BufferGroup.__table__.c
    oldest_allowed = row.version - row.max_staleness
    waiting = or_(
        groups.state.in_((GroupState.OPEN.value, GroupState.READY.value)),
        and_(
            groups.state == GroupState.LEASED.value,
            groups.lease_id.in_(_expired_leases(row.tenant, row.run, now)),
        ),
    )
    session.execute(
        update(BufferGroup)
        .where(
            *_group_key(row.tenant, row.run),
            waiting,
            func.coalesce(groups.version_min, groups.admitted_version) < oldest_allowed,
        )
        .values(state=GroupState.STALE.value, finished_at=now)
    )


def _complete_groups(session: Session, row: Row[Any]) -> None:
    """Find which open groups of the run have `size` finished episodes: make them ready, with the
    versions of their episodes (a group's oldest call decides its staleness)."""
    groups = BufferGroup.__table__.c
    open_groups = session.execute(
        select(groups.id, groups.size, groups.created_at).where(
            *_group_key(row.tenant, row.run), groups.state == GroupState.OPEN.value
        )
    ).all()
    if not open_groups:
        return
    sizes = {group.id: group.size for group in open_groups}
    columns = trajectories_table.c
    finished = session.execute(
        select(
            columns.buffer_group, func.count(), func.min(columns.version_min), func.max(columns.version_max)
        )
        .where(
            columns.buffer_group.in_(list(sizes)),
            columns.run == row.run,
            columns.tenant == row.tenant,
            columns.status != TrajectoryStatus.LIVE.value,
        )
        .group_by(columns.buffer_group)
    ).all()
    for group_id, count, version_min, version_max in finished:
        if count >= sizes[group_id]:
            session.execute(
                update(BufferGroup)
                .where(groups.id == group_id)
                .values(state=GroupState.READY.value, version_min=version_min, version_max=version_max)
            )


def _handed(session: Session, tenant: str, run: str, chosen: Sequence[str]) -> list[HandedGroup]:
    groups = BufferGroup.__table__.c
    rows = session.execute(
        select(BufferGroup.__table__).where(groups.id.in_(chosen)).order_by(groups.created_at)
    ).all()
    columns = trajectories_table.c
    episodes: dict[str, list[TrajectoryRecord]] = {group.id: [] for group in rows}
    statement = (
        select(trajectories_table)
        .where(
            columns.buffer_group.in_(list(chosen)),
            columns.run == run,
            columns.tenant == tenant,
            columns.status != TrajectoryStatus.LIVE.value,
        )
        .order_by(columns.created_at, columns.id)
    )
    for trajectory in session.execute(statement):
        record = row_to_record(trajectory)
        episodes[str(record.buffer_group)].append(record)
    return [
        HandedGroup(
            group_id=group.id,
            env=group.env,
            task_id=group.task_id,
            version_min=group.version_min,
            version_max=group.version_max,
            deliveries=group.deliveries,
            episodes=episodes[group.id],
        )
        for group in rows
    ]
