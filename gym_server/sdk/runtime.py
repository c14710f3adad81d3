"""What environments and verifiers use of the gym's runtime: sandboxes, worker processes, failure classes.

Environments and verifiers import these from here (or from `gym_server.sdk`), never from the modules that
implement them: `gym_server.sandbox`, `gym_server.workers` and `gym_server.store` are the service's
internals and may change shape. The import contract in pyproject.toml (`plugins-use-the-sdk`) checks it.
"""

from __future__ import annotations

from gym_server.core.egress_policy import parse_rule
from gym_server.sandbox.factory import select_backend
from gym_server.sandbox.pool import SandboxPool
from gym_server.sandbox.protocol import Limits, Sandbox, SpawnedProcess, describe, sandbox_path
from gym_server.sandbox.runtime import SessionSandbox, sandbox_pool, session_sandbox
from gym_server.store.records import FailureClass
from gym_server.workers import WorkerError, WorkerPool, WorkerTimeout

__all__ = [
    "FailureClass",
    "Limits",
    "Sandbox",
    "SandboxPool",
    "SessionSandbox",
    "SpawnedProcess",
    "WorkerError",
    "WorkerPool",
    "WorkerTimeout",
    "describe",
    "parse_rule",
    "sandbox_path",
    "sandbox_pool",
    "select_backend",
    "session_sandbox",
]
