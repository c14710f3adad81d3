"""What a user's own agent receives for one gym episode, and the shape of the agent itself.

The point of the gateway is that an existing agent (a LangGraph graph, an OpenAI Agents SDK app, a raw
OpenAI-client loop) becomes trainable by changing its base URL: `AgentEpisode.base_url` is an
OpenAI-compatible endpoint tied to this episode (every chat completion through it is recorded
token-exactly on the episode) and `AgentEpisode.mcp_url` serves the environment's own tools over MCP,
bound to the same episode. Both carry the episode in their path, so any client can use them as they
are: nothing depends on reading MCP `_meta` or keeping one MCP session.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["AgentEpisode", "AgentFn"]


@dataclass(frozen=True, slots=True)
class AgentEpisode:
    """One episode as an agent sees it.

    Args:
        session_id: the gym session (and stored rollout) id.
        env: the environment's name.
        task_id: the task being played.
        seed: the gym seed of the start state.
        base_url: the episode's OpenAI-compatible gateway (`.../v1/sessions/{id}/openai/v1`); pass it as
            the OpenAI client's `base_url`.
        mcp_url: the episode's MCP endpoint (streamable HTTP) with the environment's tools.
        prompt: the episode's opening messages (system and user), OpenAI chat format.
        tools: the environment's tools in OpenAI function format (the same tools `mcp_url` lists), for
            agents that pass tool schemas themselves.
        model: the model name to send in chat requests (the upstream's served name).
        api_key: what to send as the OpenAI client's `api_key` (and as `Authorization: Bearer` to
            `mcp_url`): the gym's key when it requires one, else a placeholder OpenAI clients accept.
    """

    session_id: str
    env: str
    task_id: str
    seed: int | None
    base_url: str
    mcp_url: str
    prompt: list[dict[str, Any]] = field(repr=False)
    tools: list[dict[str, Any]] = field(repr=False)
    model: str
    api_key: str = field(repr=False)

    @property
    def headers(self) -> dict[str, str]:
        """The `Authorization` header for `mcp_url` (MCP clients take headers, not an api key)."""
        return {"Authorization": f"Bearer {self.api_key}"}


AgentFn = Callable[[AgentEpisode], Awaitable[None]]
"""A user's agent: `async def agent(episode: AgentEpisode) -> None`. It plays the episode through
`episode.base_url` (and `episode.mcp_url`); its return value is ignored, its final assistant message is
the answer the environment's verifier scores when the episode did not end through the MCP tools."""
