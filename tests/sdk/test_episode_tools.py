"""Tools known only once an episode runs (`Environment.call_episode_tool`): answered beside the class's
`@tool`s, counted against the per-turn cap, and named in the unknown-tool message."""

from __future__ import annotations

from typing import Any

from gymtest import call

from gym_server import Environment, Task, VerifyResult, tool


class Dynamic(Environment):
    name = "dynamic"
    description = "an episode tool beside a class tool"

    def tools(self) -> list[dict[str, Any]]:
        echo = {"type": "function", "function": {"name": "echo", "parameters": {"type": "object"}}}
        return [echo, *super().tools()]

    async def call_episode_tool(self, name: str, arguments: Any) -> str | None:
        return f"echo {arguments}" if name == "echo" else None

    @tool
    async def end(self) -> str:
        """End it."""
        self.finish()
        return "bye"

    async def verify(self) -> VerifyResult:
        return VerifyResult(reward=1.0)


async def test_episode_tools_run_beside_class_tools() -> None:
    env = Dynamic(Task(id="t", prompt="p"))
    await env.reset()
    echoed = await env.step(call("echo", {"x": 1}))
    assert echoed.messages[0]["content"] == 'echo {"x":1}' and not echoed.done
    unknown = await env.step(call("nope"))
    assert unknown.messages[0]["content"] == "Error: unknown tool 'nope'; available tools: echo, end."
    capped = await env.run_tool_calls(
        [call("echo", {}, "a")["tool_calls"][0], call("echo", {}, "b")["tool_calls"][0]],
        tool_timeout_s=1,
        max_tool_calls=1,
    )
    assert capped[1]["content"].startswith("Error: not executed")
    finished = await env.step(call("end"))
    assert finished.done and finished.messages[0]["content"] == "bye"
