"""Sandboxes for model-written code: one protocol, one module per backend.

`select_backend(settings)` picks and checks a backend (Docker, bubblewrap, or the loudly unsafe local
runner); `backend.start()` gives a per-session `Sandbox` (`exec`, files, `spawn` for a long-lived
process); a `SandboxPool` lends warm sandboxes for stateless runs; `runtime` hands environments the
process's backend and pool. Backends are imported lazily, so importing this package needs neither the
docker SDK nor bubblewrap. Design and defaults: `sandbox/README.md` at the repository root.
"""

from gym_server.sandbox.factory import make_backend, select_backend
from gym_server.sandbox.pool import SandboxPool
from gym_server.sandbox.protocol import ExecResult, Limits, Sandbox, SandboxBackend, SpawnedProcess

__all__ = [
    "ExecResult",
    "Limits",
    "Sandbox",
    "SandboxBackend",
    "SandboxPool",
    "SpawnedProcess",
    "make_backend",
    "select_backend",
]
