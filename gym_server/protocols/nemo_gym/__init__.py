"""An environment as a NeMo Gym resources server: `/v1/environments/{env}/nemo-gym/{route}`.

NeMo Gym's agents drive a resources server over plain HTTP with JSON bodies and a session cookie, so
the facade needs no package of theirs: the wire format is spoken here (`wire.py`), the routes are one
ASGI endpoint (`endpoint.py`) over the gym's `SessionManager`, and they are always served. The mapping
is in docs/protocols.md.
"""

from __future__ import annotations

import re
from typing import Final

from starlette.types import ASGIApp, Scope

from gym_server.protocols.nemo_gym.endpoint import NemoGymEndpoint

__all__ = ["NemoGymRoutes"]

# Environment names may hold a `/` (`reasoning_gym/chain_sum`); a route (a tool name) never does.
_PATH: Final = re.compile(r"/v1/environments/(?P<env>.+)/nemo-gym/(?P<route>[^/]+)")
_MARK: Final = "/nemo-gym/"


class NemoGymRoutes:
    """A stage of the gym's front (`core.asgi.Stage`) answering the NeMo Gym paths itself.

    An episode's tool calls are its hot path, as the native steps are theirs (`SessionFastPath`): FastAPI's
    routing over every route of the app cost more than the step, so the paths are matched here.
    """

    def __init__(self) -> None:
        self.endpoint = NemoGymEndpoint()

    def take(self, scope: Scope, rest: ASGIApp) -> ASGIApp | None:
        """The endpoint for a NeMo Gym path (its parameters set in the scope); None for any other."""
        path: str = scope["path"] if scope["type"] == "http" else ""
        match = _PATH.fullmatch(path) if _MARK in path else None  # most paths never meet the regex
        if match is None:
            return None
        scope["path_params"] = match.groupdict()
        return self.endpoint
