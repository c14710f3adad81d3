"""`gym-server play ENV`: play an episode by hand in the terminal, as the model would over HTTP.

It runs the environment in-process through the same turn engine the server uses, so an author can
try tools, read the exact tool messages a model would see, and check the verifier's score.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from gym_server.cli.envs import load_entry
from gym_server.core.settings import Settings
from gym_server.sdk.environment import Environment
from gym_server.sessions.deadlines import run_verifier

console = Console()

HELP = """Type the assistant's turn:
  plain text                 an assistant message (a final answer ends single-turn episodes)
  /call NAME {"arg": 1}      a tool call (JSON arguments; several /call parts may be joined with ' && ')
  /json {...}                a raw assistant message in OpenAI form
  /tools  /verify  /help  /quit"""


def play(
    env: Annotated[str, typer.Argument(help="environment name")],
    task: Annotated[str | None, typer.Option(help="task id (default: the first task of the split)")] = None,
    split: Annotated[str | None, typer.Option(help="split to take the first task from")] = None,
    seed: Annotated[int, typer.Option(help="episode seed")] = 0,
) -> None:
    """Play one episode interactively."""
    entry = load_entry(env)
    if task is None:
        candidates = entry.dataset.tasks(split)
        if not candidates:
            console.print(f"[red]error:[/] {env} has no tasks in split {split or 'any'}")
            raise typer.Exit(2)
        chosen = candidates[0]
    else:
        chosen = entry.task(task)
    asyncio.run(_episode(entry.cls(chosen, seed), Settings()))


async def _episode(env: Environment, settings: Settings) -> None:
    limits = settings.limits
    opening = await env.reset()
    console.print(Panel(HELP, title=f"{env.name} · task {env.task.id} · seed {env.seed}"))
    _show(opening)
    try:
        while not env.done:
            line = (await asyncio.to_thread(_read)).strip()
            if line in ("/quit", "/exit"):
                break
            if line == "/help":
                console.print(HELP)
                continue
            if line == "/tools":
                _show_tools(env.tools())
                continue
            if line == "/verify":
                console.print(await run_verifier(env, limits.verify_timeout_s))
                continue
            try:
                message = parse_turn(line)
            except ValueError as exc:
                console.print(f"[red]{exc}[/]")
                continue
            outcome = await env.step(
                message, tool_timeout_s=limits.tool_timeout_s, max_tool_calls=limits.max_tool_calls_per_turn
            )
            _show(outcome.messages)
        result = await run_verifier(env, limits.verify_timeout_s)
        table = Table("reward", "components", "failure", title=f"episode over: {env.done_reason or 'quit'}")
        table.add_row(f"{result.reward:g}", orjson.dumps(result.components).decode(), result.failure or "-")
        console.print(table)
    finally:
        await env.close()


def _read() -> str:
    try:
        return input("assistant> ")
    except EOFError:
        return "/quit"


def parse_turn(line: str) -> dict[str, Any]:
    """Turn one typed line into an assistant message; raises ValueError with a readable reason."""
    if line.startswith("/json "):
        try:
            message = orjson.loads(line[6:])
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"not JSON: {exc}") from exc
        if not isinstance(message, dict):
            raise ValueError("a message must be a JSON object")
        message["role"] = "assistant"
        return message
    if line.startswith("/call "):
        calls = []
        for index, part in enumerate(line[6:].split(" && ")):
            name, _, arguments = part.strip().partition(" ")
            if not name:
                raise ValueError("usage: /call NAME {json arguments}")
            calls.append(
                {
                    "id": f"call_{index}",
                    "type": "function",
                    "function": {"name": name, "arguments": arguments.strip() or "{}"},
                }
            )
        return {"role": "assistant", "content": None, "tool_calls": calls}
    if line.startswith("/"):
        raise ValueError(f"unknown command {line.split()[0]}; /help lists them")
    return {"role": "assistant", "content": line}


def _show(messages: list[dict[str, Any]]) -> None:
    for message in messages:
        role = message.get("role", "?")
        title = f"{role}" + (f" · {message['name']}" if message.get("name") else "")
        console.print(
            Panel(
                str(message.get("content") or ""),
                title=title,
                title_align="left",
                border_style={"system": "dim", "user": "cyan", "tool": "yellow"}.get(role, "white"),
            )
        )


def _show_tools(tools: list[dict[str, Any]]) -> None:
    table = Table("tool", "description", "parameters")
    for schema in tools:
        function = schema.get("function", {})
        params = ", ".join(function.get("parameters", {}).get("properties", {}))
        table.add_row(function.get("name", "?"), function.get("description", ""), params)
    console.print(table)
