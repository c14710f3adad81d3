"""The tenant of the request being served, for the code that every protocol facade shares.

The session manager is reached from the native routes, their fast path, the MCP, OpenEnv and NeMo Gym
facades and server-driven runs; threading a tenant argument through each would be seven copies of the
same plumbing. A context variable is set once by the auth middleware for the duration of one request
and follows the tasks that request starts (a rollout run's episodes), so the manager stamps and checks
tenants in one place. None means authentication is off: no tenant is checked.
"""

from __future__ import annotations

from contextvars import ContextVar

__all__ = ["current_tenant"]

current_tenant: ContextVar[str | None] = ContextVar("gym_server_tenant", default=None)
