"""The worker pool's own errors, and the child's traceback chained to a re-raised exception."""

from __future__ import annotations

__all__ = ["PoolClosed", "RemoteTraceback", "WorkerCrashed", "WorkerError", "WorkerTimeout"]


class WorkerError(Exception):
    """Base of the pool's own errors (never raised for an exception inside the called function)."""


class WorkerTimeout(WorkerError):
    """The call ran past its `timeout_s`; its worker was killed and is being replaced."""


class WorkerCrashed(WorkerError):
    """The worker died mid-call (a segfault, `os._exit`, an OOM kill) or could not start."""


class PoolClosed(WorkerError):
    """The pool was closed before or during the call."""


class RemoteTraceback(Exception):
    """The child's formatted traceback, chained as `__cause__` of an exception re-raised in the parent."""

    def __str__(self) -> str:
        return str(self.args[0])
