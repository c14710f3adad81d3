"""An environment as a NeMo Gym resources server: `/v1/environments/{env}/nemo-gym/{route}`.

NeMo Gym's agents drive a resources server over plain HTTP with JSON bodies and a session cookie, so
the facade needs no package of theirs: the wire format is spoken here (`wire.py`), the routes are one
ASGI endpoint (`endpoint.py`) over the gym's `SessionManager`, and it is always mounted. The mapping is
in docs/protocols.md.
"""

from __future__ import annotations

from typing import Final

from fastapi import FastAPI
from starlette.routing import Route

from gym_server.protocols.nemo_gym.endpoint import NemoGymEndpoint

__all__ = ["NEMO_GYM_PATH", "mount"]

NEMO_GYM_PATH: Final = "/v1/environments/{env:path}/nemo-gym/{route}"  # env names may hold a /


def mount(app: FastAPI) -> None:
    """Add the NeMo Gym resources-server routes of every environment to `app`."""
    # A Route whose endpoint is not a function is a raw ASGI app: no FastAPI request parsing or
    # dependency solving on the episode's hot path; the endpoint answers the methods it does not serve.
    app.router.routes.append(Route(NEMO_GYM_PATH, NemoGymEndpoint(), include_in_schema=False))
