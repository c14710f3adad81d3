"""The front's stage for the URL: a NUL character (`%00`) in the path or the query is a 422 problem.

Every name, id and filter a route reads from its URL (a rollout's id, `run`, `policy`, `env`, the
inspector's filters, a facade's query) may reach the store, and PostgreSQL's `text` and `varchar`
refuse NUL: each such read was a 500 there (issue 37). No name the gym keeps may hold NUL
(`gym_server.store.storable`), so no URL needs one, and one check here closes the whole class, the
routes to come included, on SQLite as on PostgreSQL. The check is two substring tests on every request.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Scope

from gym_server.core.errors import InvalidRequest
from gym_server.core.problems import gym_error_problem

__all__ = ["UrlGuard"]

_REFUSED = InvalidRequest(
    "the URL holds a NUL character (%00), which no name, id or filter may hold (the store cannot keep it)"
)


class UrlGuard:
    """A stage of the gym's front (`core.asgi.Stage`): 422 for an HTTP request whose decoded path or raw
    query string holds NUL."""

    def take(self, scope: Scope, rest: ASGIApp) -> ASGIApp | None:
        """None for any URL without NUL; else the app answering the 422 problem."""
        if scope["type"] != "http" or ("\x00" not in scope["path"] and b"%00" not in scope["query_string"]):
            return None
        return gym_error_problem(_REFUSED)
