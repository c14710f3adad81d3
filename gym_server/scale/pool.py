"""The replicas' supervisor: start them on the Ray cluster, watch them, replace the dead, scale by load.

Load is live sessions, read from each replica's `gym_sessions_live` gauge every `check_interval_s`, plus
the sessions the entry point created on it since that read; a new session goes to the least loaded
replica. A replica is dead when its actor is gone (Ray says so: the worker or the node died), when its
server process exited, or when it answered no check for `dead_after_s`. Then its live rows in the store
are marked `lost` (the same update a restarted server runs for its own name), the entry point answers its
sessions 410 with a pointer to the stored trajectory, and a replacement starts if fewer than
`min_replicas` remain. Replicas scale between min and max by live sessions: one more whenever the live
sessions exceed `target_sessions` per replica; one fewer (drained first: no new sessions, stopped when
its last session ends) once fewer would have sufficed for `scale_down_after_s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from gym_server.scale.replica import ReplicaProcess
from gym_server.scale.sandbox_host import SandboxHosts
from gym_server.scale.settings import RayScaleSettings
from gym_server.scale.upstream import UpstreamError, UpstreamPool
from gym_server.store import repository
from gym_server.store.migrate import make_engine, upgrade_database

log = logging.getLogger(__name__)
_LIVE_GAUGE = b"\ngym_sessions_live "
_STOP_TIMEOUT_S = 15.0


class NoReplica(Exception):
    """No replica can take a new session now (all starting, draining or dead)."""


@dataclass
class Replica:
    """A started replica as the entry point sees it."""

    name: str
    actor: Any  # a Ray ActorHandle of ReplicaProcess
    upstream: UpstreamPool
    node_id: str
    pid: int
    live: int = 0  # the replica's gauge at the last read
    created_since_read: int = 0
    draining: bool = False
    last_answer: float = field(default_factory=time.monotonic)

    @property
    def load(self) -> int:
        return self.live + self.created_since_read

    @property
    def address(self) -> str:
        return f"{self.upstream.host}:{self.upstream.port}"

    @property
    def url(self) -> str:
        """The replica's own base URL, as clients on the cluster's network reach it."""
        host = f"[{self.upstream.host}]" if ":" in self.upstream.host else self.upstream.host
        return f"http://{host}:{self.upstream.port}"


class ReplicaPool:
    """The replicas of one `serve --ray`, their sessions, and the loop that keeps them healthy."""

    def __init__(
        self,
        settings: RayScaleSettings,
        env: dict[str, str],
        store_url: str,
        prefix: str,
        sandbox_hosts: SandboxHosts | None = None,
    ) -> None:
        self.settings = settings
        self.sandbox_hosts = sandbox_hosts  # with --sandbox-backend ray: the sandbox nodes' hosts
        self._env = env
        self._store_url = store_url
        self._prefix = prefix
        self._numbers = itertools.count()
        self.replicas: dict[str, Replica] = {}
        self.dead: set[str] = set()
        self._sessions: dict[str, str] = {}  # session id -> replica name
        self._starting = 0
        self._unmarked: set[str] = set()  # dead replicas whose rows are not marked lost yet
        self._surplus_since: float | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._actor_class: Any = ray.remote(ReplicaProcess)  # typed Any: the same with Ray's stubs or none
        self._engine = make_engine(store_url)

    # -- the entry point's view ------------------------------------------------------------------------
    def pick(self) -> Replica:
        """The least loaded replica that takes new sessions."""
        open_ = [replica for replica in self.replicas.values() if not replica.draining]
        if not open_:
            raise NoReplica("no replica is ready (starting or replaced); retry shortly")
        return min(open_, key=lambda replica: replica.load)

    def owner(self, session_id: str) -> str | None:
        return self._sessions.get(session_id)

    def created(self, session_id: str, replica: Replica) -> None:
        self._sessions[session_id] = replica.name
        replica.created_since_read += 1

    def forget(self, session_id: str) -> None:
        """The session is closed or unknown to its replica: stop remembering where it lived."""
        self._sessions.pop(session_id, None)

    def describe(self) -> dict[str, Any]:
        """The replicas as `GET /v1/replicas` shows them (operators and the tests read it)."""
        return {
            "replicas": [
                {
                    "name": replica.name,
                    "address": replica.address,
                    "node_id": replica.node_id,
                    "pid": replica.pid,
                    "live_sessions": replica.load,
                    "draining": replica.draining,
                }
                for replica in self.replicas.values()
            ],
            "starting": self._starting,
            "dead": sorted(self.dead),
            "min_replicas": self.settings.min_replicas,
            "max_replicas": self.settings.max_replicas,
            "sandbox_hosts": self.sandbox_hosts.describe() if self.sandbox_hosts is not None else [],
        }

    def sessions_on(self, name: str) -> int:
        return sum(1 for owner in self._sessions.values() if owner == name)

    # -- life cycle ----------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start `min_replicas` replicas; returns once all answer (raises if one cannot start).

        First, the live rows of a previous run's replicas are marked lost: Ray ended those replicas with
        that run's entry point (they belong to its job), and a new run may start fewer under those names.
        """
        await asyncio.to_thread(self._mark_previous_run_lost)
        if self.sandbox_hosts is not None:  # before the replicas, whose backend checks for hosts
            await self.sandbox_hosts.refresh()
        await asyncio.gather(*(self._launch() for _ in range(self.settings.min_replicas)))

    async def run(self) -> None:
        """Check every replica and rescale, every `check_interval_s`, until cancelled."""
        while True:
            await asyncio.sleep(self.settings.check_interval_s)
            await asyncio.gather(*(self.check(replica) for replica in list(self.replicas.values())))
            await asyncio.to_thread(self._mark_lost_pending)
            self._rescale()
            if self.sandbox_hosts is not None:
                await self.sandbox_hosts.refresh()

    async def aclose(self) -> None:
        """Stop every replica (each records its own live sessions lost on SIGTERM) and the pending starts."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*(self._retire(replica) for replica in list(self.replicas.values())))
        if self.sandbox_hosts is not None:
            await self.sandbox_hosts.aclose()
        self._engine.dispose()

    async def check(self, replica: Replica) -> bool:
        """Ask the replica's actor whether its server runs, and read its load; False once it is dead."""
        if replica.name not in self.replicas:
            return False
        try:
            alive = await asyncio.wait_for(_await(replica.actor.alive.remote()), self.settings.dead_after_s)
        except (RayActorError, TimeoutError, GetTimeoutError) as exc:
            alive = not isinstance(exc, RayActorError) and (
                time.monotonic() - replica.last_answer < self.settings.dead_after_s
            )
            if alive:
                return True
        if not alive:
            await self._declare_dead(replica)
            return False
        replica.last_answer = time.monotonic()
        await self._read_load(replica)
        return True

    async def _read_load(self, replica: Replica) -> None:
        try:
            answer = await replica.upstream.request("GET", b"/metrics", [], b"")
        except UpstreamError:
            return  # the next check decides whether it is dead
        start = answer.body.find(_LIVE_GAUGE)
        if answer.status != 200 or start < 0:
            return
        end = answer.body.find(b"\n", start + len(_LIVE_GAUGE))
        with contextlib.suppress(ValueError):
            replica.live = int(float(answer.body[start + len(_LIVE_GAUGE) : end]))
            replica.created_since_read = 0

    async def _launch(self) -> None:
        name = f"{self._prefix}-{next(self._numbers)}"
        resources = self.settings.replica_resources
        actor = self._actor_class.options(
            num_cpus=self.settings.replica_cpus,
            resources=resources or None,
            scheduling_strategy="SPREAD",
            max_restarts=0,
            max_concurrency=4,
        ).remote(name, self._env)
        self._starting += 1
        try:
            host, port, node_id = await _await(actor.start.remote(self.settings.start_timeout_s))
            pid = await _await(actor.pid.remote())
        except BaseException:
            self._starting -= 1
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
            raise
        self._starting -= 1
        self.replicas[name] = Replica(name, actor, UpstreamPool(host, port), node_id, pid)
        log.warning("replica %s started at %s:%d on node %s", name, host, port, node_id[:12])

    async def _declare_dead(self, replica: Replica) -> None:
        if self.replicas.pop(replica.name, None) is None:
            return
        self.dead.add(replica.name)
        self._unmarked.add(replica.name)
        replica.upstream.close()
        with contextlib.suppress(Exception):
            ray.kill(replica.actor, no_restart=True)
        if self.sandbox_hosts is not None:  # its sandboxes on other nodes have no one left to close them
            self._spawn(self.sandbox_hosts.release(replica.name))
        log.warning(
            "replica %s (%s) died with %d sessions; they are recorded lost",
            replica.name,
            replica.address,
            self.sessions_on(replica.name),
        )
        await asyncio.to_thread(self._mark_lost_pending)
        self._rescale()

    def _mark_previous_run_lost(self) -> None:
        upgrade_database(self._store_url)  # a new database: the schema before the first update
        with Session(self._engine) as session, session.begin():
            count = repository.mark_lost(session, self._prefix, replicas=True)
        if count:
            log.warning("marked %d sessions of %s-* lost: live when the last run ended", count, self._prefix)

    def _mark_lost_pending(self) -> None:
        for name in list(self._unmarked):
            try:
                with Session(self._engine) as session, session.begin():
                    count = repository.mark_lost(session, name)
            except SQLAlchemyError as exc:
                log.warning("cannot mark %s's sessions lost yet (retrying): %s", name, exc)
                return
            self._unmarked.discard(name)
            log.warning("marked %d live sessions of %s lost", count, name)

    def _rescale(self) -> None:
        open_ = [replica for replica in self.replicas.values() if not replica.draining]
        total = sum(replica.load for replica in self.replicas.values())
        settings = self.settings
        desired = min(
            settings.max_replicas, max(settings.min_replicas, math.ceil(total / settings.target_sessions))
        )
        have = len(open_) + self._starting
        if desired > have:
            self._surplus_since = None
            for _ in range(desired - have):
                self._spawn(self._launch())
        elif desired < have and self._starting == 0:
            now = time.monotonic()
            if self._surplus_since is None:
                self._surplus_since = now
            elif now - self._surplus_since >= settings.scale_down_after_s:
                min(open_, key=lambda replica: replica.load).draining = True
                self._surplus_since = None
        else:
            self._surplus_since = None
        for replica in list(self.replicas.values()):
            if replica.draining and replica.load == 0:
                self.replicas.pop(replica.name)
                self._spawn(self._retire(replica))

    async def _retire(self, replica: Replica) -> None:
        self.replicas.pop(replica.name, None)
        replica.upstream.close()
        with contextlib.suppress(RayActorError, TimeoutError, GetTimeoutError):
            await asyncio.wait_for(_await(replica.actor.stop.remote(_STOP_TIMEOUT_S)), _STOP_TIMEOUT_S + 5)
        with contextlib.suppress(Exception):
            ray.kill(replica.actor, no_restart=True)
        if self.sandbox_hosts is not None:  # what a stop too slow to close its sandboxes left leased
            await self.sandbox_hosts.release(replica.name)
        log.warning("replica %s stopped", replica.name)

    def _spawn(self, work: Any) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("replica start or stop failed: %s", task.exception())


async def _await(ref: Any) -> Any:
    return await ref
