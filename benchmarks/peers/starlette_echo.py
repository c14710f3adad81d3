"""The floor: a bare Starlette app answering the native API's episode routes by echoing JSON, nothing else.

`benchmarks/sessions.py` plays the native client's counter episode (create, K steps, close) against
this server beside the gym, so "the gym at 0.75 of the floor" compares like with like: the same
requests, event loop and HTTP parser (uvicorn + uvloop + httptools), with everything the gym does on
top (validation, the session and its environment, the stored trajectory, acknowledged commits, the
checks in front of every route) taken away. Each request's JSON body is parsed and sent back inside an
answer shaped like the gym's, so the floor still pays for one parse and one serialisation.

Runs from the gym's venv: `python -m uvicorn --app-dir benchmarks/peers starlette_echo:app --loop uvloop
--http httptools`.
"""

from __future__ import annotations

import uuid

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


def _json(payload: object, status_code: int = 200) -> Response:
    return Response(orjson.dumps(payload), status_code=status_code, media_type="application/json")


async def create(request: Request) -> Response:
    body = orjson.loads(await request.body())
    return _json({"session_id": uuid.uuid4().hex, "env": body.get("env")}, 201)


async def step(request: Request) -> Response:
    body = orjson.loads(await request.body())
    echoed = {"role": "tool", "content": body.get("message")}
    return _json({"messages": [echoed], "done": False, "reward": None, "info": {}})


async def close(request: Request) -> Response:
    return Response(status_code=204)


async def health(request: Request) -> Response:
    return _json({"status": "ok"})


app = Starlette(
    routes=[
        Route("/v1/sessions", create, methods=["POST"]),
        Route("/v1/sessions/{session_id}/step", step, methods=["POST"]),
        Route("/v1/sessions/{session_id}", close, methods=["DELETE"]),
        Route("/health", health),
    ]
)
