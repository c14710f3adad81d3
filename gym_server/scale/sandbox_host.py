"""Sandbox hosts: one Ray actor per node that offers `sandbox` slots, running that node's sandboxes.

A node offers slots with `ray start --resources '{"sandbox": N}'`. `SandboxHosts` (the entry point's side)
starts one `SandboxHost` on each such node, reserving all N slots of it in Ray's resource accounting, so
Ray's scheduler is what puts the hosts where the slots are, and the autoscaler sees them taken. A host
owns its node's local backend (bubblewrap or Docker) and its warm pool, and leases sandboxes to replicas:
one `lease` call per sandbox, then the sandbox's operations as calls on the host, never an actor per
sandbox (at thousands of episodes a second, actor creation would be the control plane's bottleneck).

Every lease carries its owner (the replica's server name). When the entry point declares a replica dead,
it releases that owner's leases on every host, so a killed replica leaves no sandbox running elsewhere.
A host that dies takes its sandboxes with it: its workers' bubblewrap processes die with their parent,
and the replicas' calls fail with `SandboxUnavailable` (gym_server/sandbox/ray_hosts.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import os
import threading
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Concatenate, ParamSpec, TypeVar

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from gym_server.core.egress_policy import EgressPolicy
from gym_server.core.errors import SandboxUnavailable
from gym_server.core.settings import SandboxSettings
from gym_server.sandbox.factory import select_backend
from gym_server.sandbox.pool import SandboxPool
from gym_server.sandbox.protocol import (
    Command,
    ExecResult,
    FileData,
    Limits,
    Sandbox,
    SandboxBackend,
    SpawnedProcess,
)

__all__ = ["SLOT_RESOURCE", "ReadOutcome", "SandboxHost", "SandboxHosts", "host_name"]

log = logging.getLogger(__name__)

SLOT_RESOURCE = "sandbox"
_CALL_TIMEOUT_S = 30.0

ReadOutcome = tuple[str, bytes]
"""A spawned process's read as it crosses Ray: ("ok", data), ("eof", why) or ("timeout", why)."""


_P = ParamSpec("_P")
_R = TypeVar("_R")


def host_name(prefix: str, node_id: str) -> str:
    """The named actor of the host on `node_id` (replicas find the hosts by `prefix`)."""
    return f"{prefix}-{node_id}"


@dataclass
class _Lease:
    sandbox: Sandbox
    owner: str
    give_back: contextlib.AsyncExitStack | None  # a warm-pool loan, returned (scrubbed) at close
    processes: dict[int, SpawnedProcess] = field(default_factory=dict)


def _on_host_loop(
    method: Callable[Concatenate[SandboxHost, _P], Coroutine[Any, Any, _R]],
) -> Callable[Concatenate[SandboxHost, _P], Coroutine[Any, Any, _R]]:
    """Run the method on the host's own event loop (see `SandboxHost.__init__`)."""

    async def run(self: SandboxHost, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        work = asyncio.run_coroutine_threadsafe(method(self, *args, **kwargs), self._loop)
        return await asyncio.wrap_future(work)

    functools.update_wrapper(run, method)  # Ray reads the method's signature
    return run


class SandboxHost:
    """Ray actor body (async): the sandboxes of one node, leased to replicas one slot at a time.

    Args:
        server_name: names this host's sandboxes on the node (its local backend's server name).
        slots: how many sandboxes it leases at once (the node's `sandbox` resource).
        settings: the local backend to run (`host_backend`), its image and the warm pool's size.
    """

    def __init__(self, server_name: str, slots: int, settings: SandboxSettings) -> None:
        self._server_name = server_name
        self._slots = slots
        self._settings = settings
        self._backend: SandboxBackend | None = None
        self._pool: SandboxPool | None = None
        # Ray runs an async actor's methods on uvloop in a side thread, where a subprocess's exit is
        # noticed late: 18 ms per `true` against 3 ms on a stdlib loop of the actor's own thread
        # (measured here). Every sandbox operation runs on that loop instead.
        asyncio.set_event_loop_policy(asyncio.DefaultEventLoopPolicy())
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="sandbox-host", daemon=True).start()
        self._leases: dict[str, _Lease] = {}
        self._starting = 0  # leases being made: their slots are taken while their sandboxes start
        self._process_ids = itertools.count()

    @_on_host_loop
    async def start(self) -> dict[str, Any]:
        """Choose and check the node's backend, remove what a dead host left, fill the warm pool."""
        local = self._settings.model_copy(update={"backend": self._settings.host_backend})
        self._backend = await select_backend(local, server_name=self._server_name)
        await self._backend.reap()
        self._pool = SandboxPool(self._backend, size=min(self._settings.pool_size, self._slots))
        with contextlib.suppress(SandboxUnavailable):
            await self._pool.start()
        return self.info()

    def info(self) -> dict[str, Any]:
        """Where the host runs and how loaded it is (the replicas pick the least loaded)."""
        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
            "backend": self._backend.name if self._backend is not None else None,
            "slots": self._slots,
            "leased": len(self._leases),
            "warm": self._pool.idle if self._pool is not None else 0,
            "owners": sorted({lease.owner for lease in self._leases.values()}),
        }

    @_on_host_loop
    async def lease(
        self, limits: Limits, owner: str, session_id: str | None, egress: EgressPolicy | None
    ) -> str | None:
        """A sandbox for `owner`; its id, or None when every slot is leased (the caller tries another)."""
        if self._backend is None or self._pool is None:
            raise SandboxUnavailable("the sandbox host is not started")
        if len(self._leases) + self._starting >= self._slots:
            return None
        self._starting += 1
        try:
            give_back: contextlib.AsyncExitStack | None = None
            if limits == self._pool.limits and egress is None and self._pool.idle:
                give_back = contextlib.AsyncExitStack()
                sandbox = await give_back.enter_async_context(self._pool.acquire())
            else:
                sandbox = await self._backend.start(limits, session_id=session_id, egress=egress)
        finally:
            self._starting -= 1
        self._leases[sandbox.id] = _Lease(sandbox, owner, give_back)
        return sandbox.id

    @_on_host_loop
    async def exec(
        self,
        sandbox_id: str,
        cmd: Command,
        stdin: FileData | None,
        env: Mapping[str, str] | None,
        files: Mapping[str, FileData] | None,
        timeout: float | None,  # noqa: ASYNC109 - the sandbox's own deadline
        cwd: str | None,
    ) -> ExecResult:
        sandbox = self._lease(sandbox_id).sandbox
        return await sandbox.exec(cmd, stdin=stdin, env=env, files=files, timeout=timeout, cwd=cwd)

    @_on_host_loop
    async def put_file(self, sandbox_id: str, path: str, data: FileData) -> None:
        await self._lease(sandbox_id).sandbox.put_file(path, data)

    @_on_host_loop
    async def get_file(self, sandbox_id: str, path: str, max_bytes: int | None) -> bytes | None:
        """The file's bytes, or None where there is none (FileNotFoundError on the caller's side)."""
        try:
            return await self._lease(sandbox_id).sandbox.get_file(path, max_bytes)
        except FileNotFoundError:
            return None

    @_on_host_loop
    async def spawn(
        self, sandbox_id: str, cmd: Command, env: Mapping[str, str] | None, cwd: str | None
    ) -> int:
        lease = self._lease(sandbox_id)
        process = await lease.sandbox.spawn(cmd, env=env, cwd=cwd)
        number = next(self._process_ids)
        lease.processes[number] = process
        return number

    @_on_host_loop
    async def write(self, sandbox_id: str, process: int, data: bytes) -> str | None:
        """None when written, else why not (the process ended: EOFError on the caller's side)."""
        try:
            await self._process(sandbox_id, process).write(data)
        except EOFError as exc:
            return str(exc) or "the process ended"
        return None

    @_on_host_loop
    async def read(self, sandbox_id: str, process: int, size: int, timeout: float) -> ReadOutcome:  # noqa: ASYNC109
        return await _outcome(self._process(sandbox_id, process).read(size, timeout))

    @_on_host_loop
    async def readline(
        self,
        sandbox_id: str,
        process: int,
        limit: int,
        timeout: float | None,  # noqa: ASYNC109
    ) -> ReadOutcome:
        return await _outcome(self._process(sandbox_id, process).readline(limit, timeout))

    @_on_host_loop
    async def kill(self, sandbox_id: str, process: int) -> None:
        lease = self._leases.get(sandbox_id)
        found = lease.processes.pop(process, None) if lease is not None else None
        if found is not None:
            await found.kill()

    @_on_host_loop
    async def scrub(self, sandbox_id: str) -> bool:
        lease = self._lease(sandbox_id)
        lease.processes.clear()  # the scrub kills them
        return await lease.sandbox.scrub()

    @_on_host_loop
    async def close(self, sandbox_id: str) -> None:
        """End the lease: a warm-pool sandbox goes back (scrubbed), any other is closed; idempotent."""
        await self._close(sandbox_id)

    async def _close(self, sandbox_id: str) -> None:
        lease = self._leases.pop(sandbox_id, None)
        if lease is None:
            return
        for process in lease.processes.values():
            with contextlib.suppress(Exception):
                await process.kill()
        if lease.give_back is not None:
            await lease.give_back.aclose()
        else:
            await lease.sandbox.close()

    @_on_host_loop
    async def release(self, owner: str) -> int:
        """Close every sandbox `owner` leased (it died, or it stopped); returns how many."""
        mine = [sandbox_id for sandbox_id, lease in self._leases.items() if lease.owner == owner]
        for sandbox_id in mine:
            await self._close(sandbox_id)
        if mine:
            log.warning("released %d sandboxes of %s", len(mine), owner)
        return len(mine)

    @_on_host_loop
    async def shutdown(self) -> None:
        """Close every sandbox and the backend (the entry point stops)."""
        for sandbox_id in list(self._leases):
            await self._close(sandbox_id)
        if self._pool is not None:
            await self._pool.aclose()
        if self._backend is not None:
            await self._backend.aclose()

    def _lease(self, sandbox_id: str) -> _Lease:
        lease = self._leases.get(sandbox_id)
        if lease is None:
            raise SandboxUnavailable(f"sandbox {sandbox_id} is not leased on this host (released)")
        return lease

    def _process(self, sandbox_id: str, process: int) -> SpawnedProcess:
        found = self._lease(sandbox_id).processes.get(process)
        if found is None:
            raise SandboxUnavailable(f"process {process} of sandbox {sandbox_id} is gone")
        return found


async def _outcome(read: Any) -> ReadOutcome:
    try:
        data: bytes = await read
    except EOFError as exc:
        return "eof", (str(exc) or "the process ended").encode()
    except TimeoutError as exc:
        return "timeout", (str(exc) or "no answer in time").encode()
    return "ok", data


class SandboxHosts:
    """The entry point's side: a `SandboxHost` on every alive node that offers `sandbox` slots.

    Args:
        prefix: the hosts' actor names (`host_name`); the replicas get it as `GYM_SANDBOX__RAY_HOSTS`.
        settings: the sandbox settings every host runs with.
    """

    def __init__(self, prefix: str, settings: SandboxSettings) -> None:
        self.prefix = prefix
        self._settings = settings
        self.hosts: dict[str, Any] = {}  # node id -> the host's actor handle
        self.infos: dict[str, dict[str, Any]] = {}
        self._actor_class: Any = ray.remote(SandboxHost)

    async def refresh(self) -> None:
        """Start a host on each new sandbox node, forget the hosts of nodes gone, read every host's load."""
        offering = {
            node["NodeID"]: int(node["Resources"].get(SLOT_RESOURCE, 0))
            for node in await asyncio.to_thread(_ray_nodes)  # a blocking GCS read: off the router's loop
            if node["Alive"] and node["Resources"].get(SLOT_RESOURCE, 0) >= 1
        }
        for node_id in list(self.hosts):
            if node_id not in offering:
                self._drop(node_id)
        new = [node_id for node_id in offering if node_id not in self.hosts]
        await asyncio.gather(*(self._start(node_id, offering[node_id]) for node_id in new))
        await asyncio.gather(*(self._read(node_id) for node_id in list(self.hosts)))

    async def _start(self, node_id: str, slots: int) -> None:
        actor = self._actor_class.options(
            name=host_name(self.prefix, node_id),
            num_cpus=0,
            resources={SLOT_RESOURCE: slots},  # the node's slots, taken in Ray's accounting
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            max_restarts=0,
            max_concurrency=1000,
        ).remote(f"{self.prefix}-{node_id[:8]}", slots, self._settings)
        try:
            info = await asyncio.wait_for(_await(actor.start.remote()), _CALL_TIMEOUT_S)
        except Exception as exc:
            log.warning("no sandbox host on node %s: %s", node_id[:12], exc)
            _kill(actor)
            return
        self.hosts[node_id] = actor
        self.infos[node_id] = info
        log.warning("sandbox host on node %s: %d slots, %s", node_id[:12], slots, info["backend"])

    async def _read(self, node_id: str) -> None:
        try:
            self.infos[node_id] = await asyncio.wait_for(
                _await(self.hosts[node_id].info.remote()), _CALL_TIMEOUT_S
            )
        except Exception as exc:
            log.warning("sandbox host on node %s is gone: %s", node_id[:12], exc)
            self._drop(node_id)

    def _drop(self, node_id: str) -> None:
        self.infos.pop(node_id, None)
        actor = self.hosts.pop(node_id, None)
        if actor is not None:
            _kill(actor)

    async def release(self, owner: str) -> None:
        """Close `owner`'s sandboxes on every host (a replica died or stopped)."""
        await asyncio.gather(
            *(
                asyncio.wait_for(_await(actor.release.remote(owner)), _CALL_TIMEOUT_S)
                for actor in self.hosts.values()
            ),
            return_exceptions=True,
        )

    async def aclose(self) -> None:
        await asyncio.gather(
            *(
                asyncio.wait_for(_await(actor.shutdown.remote()), _CALL_TIMEOUT_S)
                for actor in self.hosts.values()
            ),
            return_exceptions=True,
        )
        for node_id in list(self.hosts):
            self._drop(node_id)

    def describe(self) -> list[dict[str, Any]]:
        return list(self.infos.values())


def _ray_nodes() -> list[dict[str, Any]]:
    ray_api: Any = ray  # typed Any: `ray.nodes` is untyped
    nodes: list[dict[str, Any]] = ray_api.nodes()
    return nodes


def _kill(actor: Any) -> None:
    with contextlib.suppress(Exception):
        ray.kill(actor, no_restart=True)


async def _await(ref: Any) -> Any:
    return await ref
