"""NeMo Gym's data in the gym's terms, and back: dataset rows as tasks, Responses-API tools as OpenAI
function schemas, an episode's transcript as the Responses-API `response` its `/verify` reads.

A NeMo Gym row is what its agent forwards to `/seed_session` and, with the model's response, to `/verify`:
`{"responses_create_params": {"input": [...], "tools": [...]}, ...the row's own fields}` (the fields are
the server's ground truth, e.g. `expected_count`). So the whole row is the task's hidden `answer`, and
the prompt is its `input`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from gym_server.core.errors import EnvironmentDefinitionError
from gym_server.sdk.tasks import Dataset, Task

__all__ = ["RowsDataset", "openai_tools", "prompt_messages", "responses_output", "verify_request"]


def prompt_messages(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The row's `input` as chat messages: a string is one user message; each message item keeps its
    role and its text (content parts joined)."""
    given = row["responses_create_params"]["input"]
    if isinstance(given, str):
        return [{"role": "user", "content": given}]
    messages: list[dict[str, Any]] = []
    for item in given:
        content = item.get("content")
        if isinstance(content, list):
            content = "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
        messages.append({"role": item.get("role", "user"), "content": content})
    return messages


def openai_tools(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The row's Responses-API function tools (`{type, name, description, parameters}`) as the OpenAI
    chat function schemas every gym session hands out."""
    tools: list[dict[str, Any]] = []
    for tool in row["responses_create_params"].get("tools") or []:
        if tool.get("type") != "function":
            continue
        function = {"name": tool["name"], "parameters": tool.get("parameters") or {"type": "object"}}
        if tool.get("description"):
            function["description"] = tool["description"]
        tools.append({"type": "function", "function": function})
    return tools


class RowsDataset(Dataset):
    """A dataset read from NeMo Gym row files, one per split; task `n` of split `s` is `s-000n`."""

    def __init__(self, name: str, splits: dict[str, Path]) -> None:
        super().__init__(name)
        self.split_files = splits

    def files(self) -> list[Path]:
        return sorted(self.split_files.values())

    def _load(self) -> dict[str, list[Task]]:
        splits: dict[str, list[Task]] = {}
        for split, path in self.split_files.items():
            tasks: list[Task] = []
            for number, line in enumerate(path.read_bytes().splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    row = orjson.loads(line)
                    task = Task(id=f"{split}-{len(tasks):04d}", prompt=prompt_messages(row), answer=row)
                except (orjson.JSONDecodeError, ValidationError, KeyError, TypeError, AttributeError) as exc:
                    raise EnvironmentDefinitionError(f"{path}:{number}: not a NeMo Gym row: {exc!r}") from exc
                self._by_id[task.id] = task
                tasks.append(task)
            splits[split] = tasks
        return splits


def responses_output(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The assistant's turns and the tool results of a transcript as Responses-API output items."""
    output: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "assistant":
            if message.get("content"):
                text = {"type": "output_text", "text": str(message["content"]), "annotations": []}
                output.append(
                    {
                        "id": f"msg_{index}",
                        "type": "message",
                        "role": "assistant",
                        "status": "completed",
                        "content": [text],
                    }
                )
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                output.append(
                    {
                        "type": "function_call",
                        "call_id": str(call.get("id")),
                        "name": str(function.get("name")),
                        "arguments": str(function.get("arguments") or "{}"),
                    }
                )
        elif role == "tool":
            output.append(
                {
                    "type": "function_call_output",
                    "call_id": str(message.get("tool_call_id")),
                    "output": str(message.get("content") or ""),
                }
            )
    return output


def verify_request(row: dict[str, Any], messages: list[dict[str, Any]], model: str) -> dict[str, Any]:
    """`/verify`'s body: the row (its `responses_create_params` and ground-truth fields) and the episode
    as the model's `response`, with the fields NeMo Gym's `NeMoGymResponse` requires."""
    response = {
        "id": "resp_gym_server",
        "created_at": time.time(),
        "model": model,
        "object": "response",
        "output": responses_output(messages),
        "parallel_tool_calls": False,
        "tool_choice": "auto",
        "tools": row["responses_create_params"].get("tools") or [],
    }
    return {**row, "response": response}
