"""The gym episode's tools as a verifiers MCP tool server: one tool call, one gym step.

verifiers runs taskset-scoped tool servers once per eval, in their own process (`python -m` this
module), and hands each call the calling rollout's `GymState` over its state channel. So the server
holds nothing itself: `list_tools` answers the tools the gym gave this rollout's session, and
`call_tool` steps that session with an assistant message holding the one call, returning the
environment's tool message. A tool error (bad arguments, a tool that raised) is the gym's own tool
message and the episode goes on; the gym being unreachable or refusing the step is recorded in the
state (`error`), which stops the rollout and leaves it without a reward.
"""

from __future__ import annotations

import json
from typing import Any, cast

import verifiers.v1 as vf
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent, Tool
from pydantic import Field

from gym_server_verifiers.gym import GymError, request

__all__ = ["GymState", "GymToolset"]


class GymState(vf.State):
    """One rollout's gym episode, shared by the task's hooks and the tool server."""

    base_url: str = ""
    request_timeout: float = 60.0
    api_key: str | None = Field(None, repr=False)
    """The gym key of the task's config: the tool server gets it with the state over verifiers' state
    channel; verifiers stores no state with the trace."""
    session_id: str | None = None
    tools: list[dict[str, Any]] = Field(default_factory=list)
    """The session's tools as the gym gave them (OpenAI function schemas)."""
    steps: int = 0
    done: bool = False
    reward: float | None = None
    """The gym's verified reward, once the episode is scored."""
    components: dict[str, float] = Field(default_factory=dict)
    info: dict[str, Any] = Field(default_factory=dict)
    failure: str | None = None
    """The gym's failure class (e.g. `max_turns`, `verify_timeout`): a reward that is no signal."""
    error: str | None = None
    """Why the gym could not be used (unreachable, refused a step): the rollout has no signal."""
    closed: bool = False


def _assistant_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The assistant message one tool call stands for; the gym assigns the call's id."""
    call = {"type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


class GymToolset(vf.Toolset[vf.SharedToolsetConfig, GymState]):
    """Bridges each rollout's gym session into verifiers' MCP tool boundary."""

    TOOL_PREFIX = None  # the gym's tool names, unprefixed: the trajectory reads as the gym's own

    def register(self, mcp: MCPServer) -> None:
        # The catalog is per rollout (the session's tools), so the protocol handlers are replaced
        # rather than registering static tools, as verifiers' own NeMo Gym bridge does.
        server = cast(Any, mcp)
        server.list_tools = self._with_state(self.list_tools)
        server.call_tool = self._with_state(self.call_tool)

    async def list_tools(self) -> list[Tool]:
        return [
            Tool(
                name=schema["function"]["name"],
                description=schema["function"].get("description") or None,
                input_schema={"type": "object", **(schema["function"].get("parameters") or {})},
            )
            for schema in self.state.tools
        ]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context | None = None
    ) -> CallToolResult:
        state = self.state
        if state.session_id is None or state.error is not None:
            return _error(state.error or "no gym session is open for this rollout")
        try:
            result = await request(
                "POST",
                state.base_url,
                f"/v1/sessions/{state.session_id}/step",
                timeout_s=state.request_timeout,
                api_key=state.api_key,
                body={"message": _assistant_call(name, arguments)},
            )
        except GymError as exc:
            state.error = str(exc)
            return _error(state.error)
        state.steps += 1
        state.done, state.info = bool(result["done"]), dict(result["info"])
        replies = [str(m.get("content") or "") for m in result["messages"] if m.get("role") == "tool"]
        return CallToolResult(content=[TextContent(type="text", text="\n".join(replies))])


def _error(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


if __name__ == "__main__":
    GymToolset.run()
