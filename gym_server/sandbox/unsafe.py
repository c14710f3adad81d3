"""The `unsafe-no-sandbox` backend: plain host subprocesses with rlimits and nothing else.

It exists for development on machines with neither Docker nor user namespaces, and it says so loudly:
programs see the host's filesystem with the server's permissions, its network, and its other processes,
and a process that calls setsid can outlive its run. It is never chosen by `auto`; only an operator who
sets `GYM_SANDBOX__BACKEND=unsafe-no-sandbox` gets it, with a warning at every start.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from pathlib import Path

from gym_server.core.egress_policy import EgressPolicy
from gym_server.sandbox._local import LocalBackendBase, LocalSandbox
from gym_server.sandbox.protocol import WORKDIR, Limits

__all__ = ["UnsafeBackend"]

log = logging.getLogger(__name__)

WARNING = (
    "SANDBOX BACKEND IS unsafe-no-sandbox: model-written code runs as an ordinary host process with the "
    "server's permissions and network. Never use it with untrusted models or on shared machines."
)


class UnsafeBackend(LocalBackendBase):
    """Runs commands directly on the host, in a per-sandbox folder, under rlimits only."""

    name = "unsafe-no-sandbox"
    uses_status_fd = False

    def __init__(self, *, root_dir: Path | None = None, server_name: str = "gym") -> None:
        super().__init__(root_dir=root_dir, server_name=server_name, use_cgroups=False)
        log.warning(WARNING)

    async def check(self) -> None:
        """Always usable: there is nothing to check, which is the problem."""

    async def start(
        self,
        limits: Limits | None = None,
        *,
        session_id: str | None = None,
        egress: EgressPolicy | None = None,
    ) -> LocalSandbox:
        """A host folder; `egress` cannot be enforced here (commands share the host's network)."""
        log.warning(WARNING)
        if egress is not None:
            log.warning("the unsafe backend cannot filter egress: its commands reach the whole network")
        return await self.create_async(limits or Limits(), session_id, None)

    def command(
        self,
        sandbox: LocalSandbox,
        argv: list[str],
        env: Mapping[str, str],
        cwd: str,
        timeout: float,
        status_fd: int,
    ) -> tuple[list[str], str]:
        limits = sandbox.limits
        host_cwd = (
            str(sandbox.folder / "work") + cwd.removeprefix(WORKDIR) if cwd.startswith(WORKDIR) else cwd
        )
        rlimits = [
            f"--as={limits.memory_mb * 1024 * 1024}",
            f"--fsize={limits.file_size_mb * 1024 * 1024}",
            f"--nofile={limits.open_files}",
            f"--cpu={math.ceil(timeout * limits.cpus) + 1}",
            "--core=0",
        ]
        environment = self.environment(env)
        environment["HOME"] = str(sandbox.folder / "work")
        environment["TMPDIR"] = str(sandbox.folder / "tmp")
        assignments = [f"{key}={value}" for key, value in environment.items()]
        return ["prlimit", *rlimits, "--", "env", "-i", *assignments, *argv], host_cwd
