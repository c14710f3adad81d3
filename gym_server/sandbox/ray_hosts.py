"""The `ray` sandbox backend: sandboxes leased from the cluster's sandbox hosts, run on other nodes.

`serve --ray --sandbox-backend ray` starts a `SandboxHost` actor on every node that offers `sandbox`
slots (gym_server/scale/sandbox_host.py) and tells the replicas the hosts' name prefix
(`GYM_SANDBOX__RAY_HOSTS`). A replica's `RayHostsBackend` joins the cluster as a Ray driver (the
`RAY_ADDRESS` its actor gave it), leases each sandbox from the least loaded host with a free slot, and
runs the sandbox's operations as calls on that host. Environments do not know the difference.

Failure is always `SandboxUnavailable`, never a hang: every call is bounded (the command's own timeout
plus `_MARGIN_S`), and a host whose node died answers Ray's actor error within seconds, so the episode's
tool call fails as it would with a killed local sandbox, and verification stores `sandbox_error`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Any

from gym_server.core.egress_policy import EgressPolicy
from gym_server.core.errors import SandboxUnavailable
from gym_server.sandbox.protocol import Command, ExecResult, FileData, Limits, Sandbox, SpawnedProcess

__all__ = ["RayHostsBackend"]

_MARGIN_S = 15.0  # beyond a command's own deadline: the hop to the host, a cold sandbox start
_HOSTS_FRESH_S = 1.0  # how long a read of the hosts' loads is used before it is read again
_ABANDONED_WAIT_S = 300.0  # how long a lease whose caller gave up is waited for, to close it
_NAMESPACE = "gym-server"  # the entry point's Ray namespace, where the hosts are named


async def _call(ref: Awaitable[Any], timeout_s: float | None, where: str) -> Any:
    """One call on a host, bounded, with every Ray failure turned into `SandboxUnavailable`."""
    from ray.exceptions import RayActorError, RayError, RayTaskError

    try:
        return await asyncio.wait_for(_await(ref), timeout_s)
    except TimeoutError as exc:
        raise SandboxUnavailable(f"the sandbox host {where} did not answer within {timeout_s:g} s") from exc
    except RayActorError as exc:
        raise SandboxUnavailable(f"the sandbox host {where} is gone (its node or process died)") from exc
    except RayTaskError as exc:
        cause = exc.cause
        if isinstance(cause, SandboxUnavailable):
            raise SandboxUnavailable(f"{where}: {cause.detail}") from exc
        if isinstance(cause, ValueError):  # a bad path or command: the caller's mistake, as locally
            raise ValueError(str(cause)) from exc
        raise SandboxUnavailable(f"the sandbox host {where} failed: {cause!r}") from exc
    except RayError as exc:
        raise SandboxUnavailable(f"the sandbox host {where} cannot be reached: {exc}") from exc


async def _await(ref: Awaitable[Any]) -> Any:
    return await ref


@dataclass
class _Host:
    name: str
    actor: Any  # a Ray ActorHandle of SandboxHost
    node_id: str
    slots: int
    leased: int

    @property
    def where(self) -> str:
        return f"on node {self.node_id[:12]}"


class RaySpawnedProcess:
    """A long-lived process in a remote sandbox: its pipes, read and written through the host."""

    def __init__(self, sandbox: RaySandbox, number: int) -> None:
        self._sandbox = sandbox
        self._number = number
        self._alive = True

    @property
    def alive(self) -> bool:
        return self._alive and not self._sandbox.closed

    async def write(self, data: bytes) -> None:
        why = await self._sandbox.call("write", None, self._number, data)
        if why is not None:
            self._alive = False
            raise EOFError(why)

    async def read(self, size: int, timeout: float) -> bytes:  # noqa: ASYNC109 - a per-request deadline
        return self._outcome(await self._sandbox.call("read", timeout, self._number, size, timeout))

    async def readline(self, limit: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        return self._outcome(await self._sandbox.call("readline", timeout, self._number, limit, timeout))

    async def kill(self) -> None:
        self._alive = False
        with contextlib.suppress(SandboxUnavailable):  # a gone host has killed it already
            await self._sandbox.call("kill", None, self._number)

    def _outcome(self, outcome: tuple[str, bytes]) -> bytes:
        kind, data = outcome
        if kind == "eof":
            self._alive = False
            raise EOFError(data.decode())
        if kind == "timeout":
            raise TimeoutError(data.decode())
        return data


class RaySandbox:
    """A sandbox leased from a `SandboxHost`: every operation is a call on that host."""

    def __init__(self, sandbox_id: str, limits: Limits, host: _Host) -> None:
        self.id = sandbox_id
        self.limits = limits
        self.host = host
        self._closed = False  # by `close()`: the host was told
        self._broken = False  # a call failed: nothing more runs here, but the lease may still be held

    @property
    def closed(self) -> bool:
        return self._closed or self._broken

    @property
    def released(self) -> bool:
        """`close()` ran: the host was told to end the lease."""
        return self._closed

    async def call(self, method: str, timeout: float | None, *args: Any) -> Any:  # noqa: ASYNC109
        """`method` of the host on this sandbox, bounded by `timeout` (the limits' default) plus a margin."""
        if self.closed:
            raise SandboxUnavailable(f"sandbox {self.id} is closed")
        try:
            return await self._host_call(method, timeout, *args)
        except SandboxUnavailable:
            self._broken = True
            raise

    async def _host_call(self, method: str, timeout: float | None, *args: Any) -> Any:  # noqa: ASYNC109
        bound = (self.limits.timeout_s if timeout is None else timeout) + _MARGIN_S
        return await _call(getattr(self.host.actor, method).remote(self.id, *args), bound, self.host.where)

    async def exec(
        self,
        cmd: Command,
        *,
        stdin: FileData | None = None,
        env: Mapping[str, str] | None = None,
        files: Mapping[str, FileData] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the sandbox's own deadline, not a caller's
        cwd: str | None = None,
    ) -> ExecResult:
        result: ExecResult = await self.call(
            "exec", timeout, cmd, stdin, dict(env or {}), dict(files or {}), timeout, cwd
        )
        return result

    async def put_file(self, path: str, data: FileData) -> None:
        await self.call("put_file", None, path, data)

    async def get_file(self, path: str, max_bytes: int | None = None) -> bytes:
        data: bytes | None = await self.call("get_file", None, path, max_bytes)
        if data is None:
            raise FileNotFoundError(path)
        return data

    async def spawn(
        self, cmd: Command, *, env: Mapping[str, str] | None = None, cwd: str | None = None
    ) -> SpawnedProcess:
        return RaySpawnedProcess(self, await self.call("spawn", None, cmd, dict(env or {}), cwd))

    async def scrub(self) -> bool:
        try:
            return bool(await self.call("scrub", None))
        except SandboxUnavailable:
            return False

    async def close(self) -> None:
        """Tell the host to end the lease, also after a failed call (a timeout may leave it held)."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(SandboxUnavailable):  # a gone host took the sandbox with it
            await self._host_call("close", None)


class RayHostsBackend:
    """Sandboxes on the Ray cluster's sandbox nodes, leased from their `SandboxHost` actors.

    Args:
        server_name: the owner of every lease (the replica's server name): the entry point releases a
            dead replica's sandboxes by it.
        hosts: the hosts' actor name prefix (`GYM_SANDBOX__RAY_HOSTS`, set by `serve --ray`).
        address: the cluster (default `RAY_ADDRESS`, which a replica's actor sets).
    """

    name = "ray"

    def __init__(self, *, server_name: str, hosts: str, address: str | None = None) -> None:
        self.server_name = server_name
        self.hosts_prefix = hosts
        self._address = address or os.environ.get("RAY_ADDRESS") or "auto"
        self._hosts: list[_Host] = []
        self._read_at = -_HOSTS_FRESH_S
        self._sandboxes: dict[str, RaySandbox] = {}
        self._abandoned: set[asyncio.Task[None]] = set()

    async def start(
        self,
        limits: Limits | None = None,
        *,
        session_id: str | None = None,
        egress: EgressPolicy | None = None,
    ) -> Sandbox:
        """A sandbox from the least loaded host with a free slot (the next one if that one just filled)."""
        limits = limits or Limits()
        hosts = await self._read_hosts()
        gone: list[str] = []
        for host in sorted(hosts, key=lambda host: host.leased / host.slots):
            if host.leased >= host.slots:
                continue
            ref = host.actor.lease.remote(limits, self.server_name, session_id, egress)
            try:
                sandbox_id: str | None = await _call(ref, limits.timeout_s + _MARGIN_S, host.where)
            except SandboxUnavailable as exc:
                self._abandon(host, ref)
                self._read_at = -_HOSTS_FRESH_S  # read the hosts again: this one may be gone
                gone.append(exc.detail)
                continue
            except asyncio.CancelledError:  # the caller gave up (a verification's deadline, a stop)
                self._abandon(host, ref)
                raise
            if sandbox_id is None:
                host.leased = host.slots  # full since the last read
                continue
            host.leased += 1
            sandbox = RaySandbox(sandbox_id, limits, host)
            self._sandboxes[sandbox_id] = sandbox
            return sandbox
        raise SandboxUnavailable(
            f"no sandbox host has a free slot ({self.hosts_prefix}-*: "
            + (", ".join(f"{host.where} {host.leased}/{host.slots} leased" for host in hosts) or "none")
            + "".join(f"; {why}" for why in gone)
            + "; nodes offer slots with `ray start --resources '{\"sandbox\": N}'`)"
        )

    def _abandon(self, host: _Host, ref: Any) -> None:
        """Close the sandbox of a lease nobody waits for any more, once the host has made it: the host
        would otherwise hold the slot for this replica until it dies."""

        async def close_when_leased() -> None:
            with contextlib.suppress(SandboxUnavailable, ValueError):
                sandbox_id = await _call(ref, _ABANDONED_WAIT_S, host.where)
                if sandbox_id is not None:
                    await _call(host.actor.close.remote(sandbox_id), _MARGIN_S, host.where)

        task = asyncio.get_running_loop().create_task(close_when_leased())
        self._abandoned.add(task)
        task.add_done_callback(self._abandoned.discard)

    async def check(self) -> None:
        if not await self._read_hosts(fresh=True):
            raise SandboxUnavailable(
                f"no sandbox host runs on the Ray cluster at {self._address} (no actor "
                f"{self.hosts_prefix}-*: no node offers `sandbox` slots, or the entry point was not started "
                "with --sandbox-backend ray)"
            )

    async def reap(self) -> int:
        return 0  # each host reaps its own node when it starts

    async def aclose(self) -> None:
        """Close this replica's sandboxes (the server stops)."""
        sandboxes, self._sandboxes = list(self._sandboxes.values()), {}
        await asyncio.gather(*(sandbox.close() for sandbox in sandboxes), return_exceptions=True)

    async def _read_hosts(self, *, fresh: bool = False) -> list[_Host]:
        if not fresh and time.monotonic() - self._read_at < _HOSTS_FRESH_S:
            return self._hosts
        await asyncio.to_thread(self._connect)
        import ray

        names = [
            name
            for name in await asyncio.to_thread(ray.util.list_named_actors)
            if name.startswith(self.hosts_prefix + "-")
        ]
        hosts = await asyncio.gather(*(self._host(name) for name in names))
        self._hosts = [host for host in hosts if host is not None]
        self._read_at = time.monotonic()
        self._sandboxes = {key: box for key, box in self._sandboxes.items() if not box.released}
        return self._hosts

    async def _host(self, name: str) -> _Host | None:
        import ray

        try:
            actor = ray.get_actor(name)
            info = await _call(actor.info.remote(), _MARGIN_S, name)
        except (ValueError, SandboxUnavailable):
            return None  # gone between the listing and the read
        return _Host(name, actor, str(info["node_id"]), int(info["slots"]), int(info["leased"]))

    def _connect(self) -> None:
        import ray

        if not ray.is_initialized():
            ray.init(
                address=self._address,
                namespace=_NAMESPACE,
                include_dashboard=False,
                configure_logging=False,
                log_to_driver=False,
            )
