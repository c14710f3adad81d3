"""`@tool`: schemas from hints and docstrings, argument validation, and errors that become text."""

from __future__ import annotations

import asyncio
from typing import Annotated, Literal

import pytest
from pydantic import Field

from gym_server import ToolError, tool
from gym_server.sdk.tools import ToolSpec


class Owner:
    @tool
    async def schedule(
        self, title: str, when: Literal["am", "pm"] = "am", people: list[str] | None = None
    ) -> dict[str, object]:
        """Put a meeting in the calendar.

        Longer text that the model does not need.

        Args:
            title: what the meeting is about,
                on two lines
            when: morning or afternoon
            people: who to invite
        """
        return {"title": title, "when": when, "people": people or []}

    @tool(name="count-words")
    def count(self, text: Annotated[str, Field(max_length=20)]) -> int:
        """Count words."""
        return len(text.split())

    @tool
    async def fails(self) -> str:
        """Always fails."""
        raise ToolError("the calendar is read-only today")

    @tool
    async def crashes(self) -> str:
        """Has a bug."""
        raise KeyError("slot")

    @tool
    async def sleeps(self) -> str:
        """Takes too long."""
        await asyncio.sleep(5)
        return "late"


def spec(name: str) -> ToolSpec:
    for value in vars(Owner).values():
        found = getattr(value, "__gym_tool__", None)
        if isinstance(found, ToolSpec) and found.name == name:
            return found
    raise KeyError(name)


def test_schema_from_hints_and_docstring() -> None:
    schema = spec("schedule").schema()
    assert schema["type"] == "function"
    function = schema["function"]
    assert function["description"] == "Put a meeting in the calendar."
    params = function["parameters"]
    assert params["required"] == ["title"]
    assert params["additionalProperties"] is False
    assert params["properties"]["title"] == {
        "type": "string",
        "description": "what the meeting is about, on two lines",
    }
    assert params["properties"]["when"]["enum"] == ["am", "pm"]
    assert spec("count-words").schema()["function"]["parameters"]["properties"]["text"]["maxLength"] == 20


async def test_invoke_validates_and_renders() -> None:
    owner = Owner()
    assert await spec("schedule").invoke(owner, '{"title": "sync", "when": "pm"}', 1) == (
        '{"title":"sync","when":"pm","people":[]}',
        True,
    )
    assert await spec("count-words").invoke(owner, {"text": "a b c"}, 1) == ("3", True)


@pytest.mark.parametrize(
    ("name", "arguments", "needle"),
    [
        ("schedule", "{", "not valid JSON"),
        ("schedule", "[1]", "must be a JSON object"),
        ("schedule", '{"when": "noon"}', "title: Field required"),
        ("schedule", '{"title": "x", "when": "noon"}', "when:"),
        ("count-words", '{"text": "' + "w " * 30 + '"}', "at most 20 characters"),
        ("fails", "{}", "Error: the calendar is read-only today"),
        ("crashes", "{}", "failed: KeyError"),
        ("sleeps", "{}", "timed out after 0.05 s"),
    ],
)
async def test_every_failure_is_a_message(name: str, arguments: str, needle: str) -> None:
    text, ok = await spec(name).invoke(Owner(), arguments, 0.05)
    assert not ok
    assert needle in text


@pytest.mark.parametrize("bad", ["_private", "has space", "9lives", "x" * 65, "__init__"])
def test_tool_names_must_be_plain_identifiers(bad: str) -> None:
    async def fn(self: object) -> str:
        """Nothing."""
        return ""

    with pytest.raises(ValueError, match="must start with a letter"):
        tool(name=bad)(fn)


def test_parameters_need_type_hints() -> None:
    def untyped(self, x):  # type: ignore[no-untyped-def]
        """No hints."""

    with pytest.raises(ValueError, match="needs a type hint"):
        tool(untyped)
