"""What an OpenEnv server answers about itself, under the facade's base URL: `/health`, `/metadata`,
`/schema`, `/openapi.json` and the JSON-RPC `/mcp`.

`openenv validate --url BASE` (openenv-core's runtime check) asks a server for these, and OpenEnv's own
`create_app` serves them. Here they describe the facade (`{env}` as an OpenEnv environment): its
metadata from the catalog, the JSON schemas of its actions, observations and state, and an OpenAPI
document of its own routes (the gym's, with the prefix taken off), whose `info.version` is the OpenEnv
HTTP API version the facade speaks. `/mcp` answers JSON-RPC: `tools/list` (the catalog's tools, as
OpenEnv's `/mcp` lists them without a session); OpenEnv's production-mode sessions
(`openenv/session/create`, `tools/call` outside an episode) are not served: an episode's tools are
called through `/ws` or `/step`, where each call is a stored step (docs/protocols.md).
"""

from __future__ import annotations

from typing import Any, Final

import orjson
from fastapi import APIRouter, Request, Response
from pydantic import TypeAdapter

from gym_server.core import jsontext
from gym_server.core.problems import StrictJsonRoute
from gym_server.protocols.mcp.mapping import mcp_tool
from gym_server.protocols.openenv import mapping
from gym_server.protocols.openenv.http import OPENENV_HTTP_PREFIX
from gym_server.sdk.registry import EnvironmentEntry

__all__ = ["OPENENV_API_VERSION", "openapi_document", "router"]

# The OpenEnv HTTP API whose routes and shapes the facade serves: openenv-core 0.3.0's `create_app`
# declares this version (`openenv validate` reads it as the `openenv-http/1.x` profile).
OPENENV_API_VERSION: Final = "1.0.0"

router = APIRouter(prefix=OPENENV_HTTP_PREFIX, tags=["openenv"], route_class=StrictJsonRoute)

_PARSE_ERROR, _INVALID_REQUEST, _METHOD_NOT_FOUND = -32700, -32600, -32601

_OBSERVATION_SCHEMA: Final[dict[str, Any]] = {
    "title": "Observation",
    "description": "A reset's (messages, tools), a call_tool's (OpenEnv's CallToolObservation: tool_name, "
    "result, error), a message's (messages) or a list_tools' (tools) observation; the episode's state "
    "under metadata['gym-server/episode']",
    "type": "object",
    "properties": {
        "messages": {"type": "array", "items": {"type": "object"}},
        "tools": {"type": "array", "items": {"type": "object"}},
        "tool_name": {"type": "string"},
        "result": {"anyOf": [{"type": "object"}, {"type": "null"}]},
        "error": {"anyOf": [{"type": "object"}, {"type": "null"}]},
        "metadata": {"type": "object"},
    },
}

_STATE_SCHEMA: Final[dict[str, Any]] = {
    "title": "State",
    "description": "OpenEnv's State (episode_id: the gym session id, step_count: turns) and the gym's facts",
    "type": "object",
    "properties": {
        "episode_id": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "step_count": {"type": "integer", "minimum": 0},
        "env": {"type": "string"},
        "task_id": {"type": "string"},
        "seed": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "done": {"type": "boolean"},
        "done_reason": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "reward": {"anyOf": [{"type": "number"}, {"type": "null"}]},
        "max_turns": {"type": "integer"},
    },
    "required": ["episode_id", "step_count"],
}


def _entry(request: Request, env: str) -> EnvironmentEntry:
    entry: EnvironmentEntry = request.app.state.registry.get(env)  # 404 for an unknown environment
    return entry


def _json(payload: Any) -> Response:
    return Response(jsontext.dumps(payload, default=str), media_type="application/json")


@router.get("/health", summary="OpenEnv health: the facade answers")
async def health(env: str, request: Request) -> Response:
    _entry(request, env)
    return _json({"status": "healthy"})


@router.get("/metadata", summary="OpenEnv metadata: the environment's name, description and version")
async def metadata(env: str, request: Request) -> Response:
    entry = _entry(request, env)
    return _json(
        {
            "name": entry.name,
            "description": entry.cls.description,
            "readme_content": None,
            "version": entry.version,
            "author": None,
            "documentation_url": None,
        }
    )


@router.get("/schema", summary="OpenEnv schemas of the facade's actions, observations and state")
async def schema(env: str, request: Request) -> Response:
    _entry(request, env)
    action = TypeAdapter(mapping.Action).json_schema()
    return _json({"action": action, "observation": _OBSERVATION_SCHEMA, "state": _STATE_SCHEMA})


@router.get(
    "/openapi.json", summary="OpenAPI document of this OpenEnv facade's routes", include_in_schema=False
)
async def openapi(env: str, request: Request) -> Response:
    entry = _entry(request, env)
    return _json(openapi_document(request.app.openapi(), entry.name))


@router.post("/mcp", summary="OpenEnv's JSON-RPC /mcp: tools/list (the catalog's tools)")
async def mcp(env: str, request: Request) -> Response:
    entry = _entry(request, env)
    try:
        body: Any = orjson.loads(await request.body())
    except orjson.JSONDecodeError:
        return _json(_rpc_error(None, _PARSE_ERROR, "Parse error"))
    request_id = body.get("id") if isinstance(body, dict) else None
    if not isinstance(body, dict) or not isinstance(body.get("method"), str):
        return _json(
            _rpc_error(request_id, _INVALID_REQUEST, "Invalid request: a JSON-RPC request has a method")
        )
    if body["method"] == "tools/list":
        tools = [mcp_tool(schema) for schema in entry.cls.catalog_tools()]
        return _json({"jsonrpc": "2.0", "id": request_id, "result": {"tools": tools}})
    return _json(
        _rpc_error(
            request_id,
            _METHOD_NOT_FOUND,
            f"method {body['method'][:80]!r} is not served: each tool call is a step of an episode, through "
            f"/ws or /step here (OpenEnv's production-mode sessions are not served), or the MCP facade at "
            f"/v1/environments/{entry.name}/mcp",
        )
    )


def _rpc_error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def openapi_document(gym_openapi: dict[str, Any], env: str) -> dict[str, Any]:
    """The facade's own OpenAPI document, cut from the gym's: its routes with the prefix taken off (so
    `/reset`, `/step`, `/state`, ... as OpenEnv's server lists them) and without the `env` parameter."""
    prefix = OPENENV_HTTP_PREFIX.replace("{env:path}", "{env}")
    paths: dict[str, Any] = {}
    for path, operations in gym_openapi.get("paths", {}).items():
        if not path.startswith(prefix + "/"):
            continue
        paths[path[len(prefix) :]] = {
            method: {
                **operation,
                "parameters": [p for p in operation.get("parameters", []) if p.get("name") != "env"],
            }
            for method, operation in operations.items()
        }
    return {
        "openapi": gym_openapi.get("openapi", "3.1.0"),
        "info": {
            "title": f"gym-server: {env} as an OpenEnv environment",
            "version": OPENENV_API_VERSION,
            "description": "OpenEnv's HTTP API over gym episodes; the WebSocket session is at /ws.",
        },
        "paths": paths,
        "components": gym_openapi.get("components", {}),
    }
