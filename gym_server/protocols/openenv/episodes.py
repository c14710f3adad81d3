"""One OpenEnv episode on the gym's `SessionManager`: what both transports (WebSocket, HTTP) do.

A reset opens a gym session exactly as `POST /v1/sessions` does (same capacity, TTL, budgets, sandbox
admission), with the OpenEnv lineage in the trajectory's metadata; an action is one native step (or,
for `list_tools`, a read); the episode's close is the native close, committed before it returns.
"""

from __future__ import annotations

from typing import Any, Final

from pydantic import ValidationError

from gym_server.protocols.mcp.mapping import assistant_tool_call
from gym_server.protocols.openenv import mapping
from gym_server.sdk.messages import Message
from gym_server.sessions.live import LiveSession
from gym_server.sessions.manager import SessionManager

__all__ = ["PROTOCOL", "act", "open_episode"]

# The trajectory metadata's `protocol`, so a stored episode says which facade played it.
PROTOCOL: Final = "openenv"


async def open_episode(
    manager: SessionManager, env: str, params: mapping.ResetParams, transport: str
) -> LiveSession:
    """Open the gym session a reset stands for.

    Raises:
        GymError: as `POST /v1/sessions` would (429 at capacity, 404 unknown env or task, ...).
    """
    lineage: dict[str, Any] = {"protocol": PROTOCOL, "transport": transport}
    if params.episode_id is not None:
        lineage["episode_id"] = params.episode_id
    return await manager.create(
        env, task_id=params.task_id, seed=params.seed, split=params.split, run=params.run, metadata=lineage
    )


async def act(
    manager: SessionManager,
    session_id: str,
    parsed: mapping.CallTool | mapping.ListTools | mapping.SendMessage,
) -> dict[str, Any]:
    """Apply one parsed OpenEnv action to the live session; returns OpenEnv's step answer.

    Raises:
        mapping.ActionError: a tool call the native step would refuse (nothing is stored).
        GymError: the session is unknown, finished or expired, or the step was refused (as natively).
    """
    if isinstance(parsed, mapping.ListTools):
        return mapping.list_tools_result(manager.get(session_id))
    if isinstance(parsed, mapping.SendMessage):
        message = parsed.message.to_dict()
    else:
        try:  # the native step's one validation (e.g. a name that cannot be encoded as UTF-8)
            message = Message.model_validate(
                assistant_tool_call(parsed.tool_name, parsed.arguments)
            ).to_dict()
        except ValidationError as exc:
            raise mapping.ActionError(
                "invalid tool call", mapping.VALIDATION_ERROR, mapping.validation_errors(exc)
            ) from None
    result = await manager.step(session_id, message)
    return mapping.step_result(session_id, parsed, result)
