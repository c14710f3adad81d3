"""The MCP facade's pure translations (gym_server/protocols/mcp/mapping.py)."""

from __future__ import annotations

import orjson
import pytest

from gym_server.core.errors import AtCapacity, InvalidRequest, SessionExpired, SessionFinished, TaskNotFound
from gym_server.protocols.mcp import mapping
from gym_server.sdk.tools import ToolSpec


def test_a_tool_schema_becomes_an_mcp_tool_with_its_input_schema() -> None:
    async def add(self: object, amount: int) -> int:
        """Add to the counter.

        Args:
            amount: between -10 and 10
        """
        return amount

    tool = mapping.mcp_tool(ToolSpec.from_function(add).schema())
    assert tool["name"] == "add"
    assert tool["description"] == "Add to the counter."
    assert tool["inputSchema"]["type"] == "object"
    assert tool["inputSchema"]["required"] == ["amount"]
    assert tool["inputSchema"]["properties"]["amount"]["type"] == "integer"


def test_a_schema_without_parameters_gets_an_empty_object_schema() -> None:
    schema = {"type": "function", "function": {"name": "ping", "parameters": {}}}
    assert mapping.mcp_tool(schema) == {"name": "ping", "inputSchema": {"type": "object"}}


def test_a_call_is_an_assistant_message_in_openai_form_with_json_string_arguments() -> None:
    message = mapping.assistant_tool_call("add", {"amount": 6})
    assert message["role"] == "assistant"
    (call,) = message["tool_calls"]
    assert call["function"]["name"] == "add"
    assert orjson.loads(call["function"]["arguments"]) == {"amount": 6}
    assert "id" not in call  # the engine numbers it, as for a native call without an id
    assert (
        orjson.loads(mapping.assistant_tool_call("read", None)["tool_calls"][0]["function"]["arguments"])
        == {}
    )


@pytest.mark.parametrize(
    ("content", "error"),
    [
        ("Error: invalid arguments for 'add': amount: Input should be a valid integer.", True),
        ("Error: tool 'run' timed out after 30 s.", True),
        ("20", False),
        ("no Error: here", False),
        ("", False),
    ],
)
def test_tool_messages_opening_with_error_are_mcp_tool_errors(content: str, error: bool) -> None:
    assert mapping.is_tool_error(content) is error


def test_the_query_chooses_the_task_like_a_native_create() -> None:
    params = mapping.parse_episode_params([("task_id", "counter-0001"), ("seed", "7"), ("run", "r1")])
    assert (params.task_id, params.seed, params.split, params.run) == ("counter-0001", 7, None, "r1")
    assert mapping.parse_episode_params([]).seed is None


@pytest.mark.parametrize(
    ("query", "needle"),
    [
        ([("seed", "x")], "seed"),
        ([("seed", "-1")], "seed"),
        ([("ttl_s", "5")], "ttl_s"),
        ([("seed", "1"), ("seed", "2")], "more than once: seed"),
    ],
)
def test_a_bad_query_is_a_clear_invalid_request(query: list[tuple[str, str]], needle: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        mapping.parse_episode_params(query)
    assert needle in caught.value.detail


def test_gym_errors_map_to_json_rpc_codes_with_the_problem_as_data() -> None:
    assert mapping.error_code(InvalidRequest("x").status) == mapping.INVALID_PARAMS
    assert mapping.error_code(TaskNotFound("counter", "t").status) == mapping.INVALID_REQUEST
    assert mapping.error_code(SessionFinished("s", "submitted").status) == mapping.INVALID_REQUEST
    assert mapping.error_code(SessionExpired("s").status) == mapping.INVALID_REQUEST
    assert mapping.error_code(AtCapacity(1, 2).status) == mapping.INTERNAL_ERROR
    body = orjson.loads(mapping.jsonrpc_error_body(AtCapacity(1, 2), 7))
    assert body["jsonrpc"] == "2.0" and body["id"] == 7
    assert "maximum of 1 live sessions" in body["error"]["message"]
    data = body["error"]["data"]
    assert data["status"] == 429 and data["retry_after_s"] == 2
    assert data["type"] == "urn:gym-server:problem:at-capacity"


def test_instructions_carry_every_opening_message() -> None:
    text = mapping.instructions(
        "counter",
        "counter-0000",
        [{"role": "system", "content": "You control a counter."}, {"role": "user", "content": "Reach 26."}],
    )
    assert "'counter'" in text and "'counter-0000'" in text
    assert "[system]\nYou control a counter." in text and "[user]\nReach 26." in text


def test_episode_meta_sits_under_one_namespaced_key() -> None:
    meta = mapping.episode_meta("abc", done=True, reward=1.0, info={"turn": 3})
    assert meta == {
        "gym-server/episode": {"session_id": "abc", "done": True, "reward": 1.0, "info": {"turn": 3}}
    }


# -- the other direction: an MCP server's tools and results inside a gym episode
# (environments/mcp_tools)


def test_an_mcp_tool_becomes_an_openai_function_and_back() -> None:
    tool = {
        "name": "convert_time",
        "description": "Convert a time",
        "inputSchema": {"type": "object", "properties": {"time": {"type": "string"}}, "required": ["time"]},
    }
    function = mapping.openai_function(tool)
    assert function == {
        "type": "function",
        "function": {
            "name": "convert_time",
            "description": "Convert a time",
            "parameters": tool["inputSchema"],
        },
    }
    assert mapping.mcp_tool(function) == tool
    bare = mapping.openai_function({"name": "ping", "title": "Ping it", "inputSchema": {}})
    assert bare["function"]["parameters"] == {"type": "object", "properties": {}}
    assert bare["function"]["description"] == "Ping it"


def test_a_tool_result_becomes_the_text_of_a_tool_message() -> None:
    text = {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    assert mapping.tool_result_text(text) == "a\nb"
    image = {"content": [{"type": "image", "data": "AAAA", "mimeType": "image/png"}]}
    assert mapping.tool_result_text(image) == "[image content (image/png) not shown]"
    resource = {"content": [{"type": "resource", "resource": {"uri": "file:///x", "text": "inside"}}]}
    assert mapping.tool_result_text(resource) == "inside"
    structured = {"content": [], "structuredContent": {"n": 1}}
    assert mapping.tool_result_text(structured) == '{"n":1}'
    failed = {"content": [{"type": "text", "text": "Invalid timezone: Mars"}], "isError": True}
    assert mapping.tool_result_text(failed) == "Error: Invalid timezone: Mars"
    assert mapping.is_tool_error(mapping.tool_result_text(failed))
    already = {"content": [{"type": "text", "text": "Error: no"}], "isError": True}
    assert mapping.tool_result_text(already) == "Error: no"
    assert not mapping.is_tool_error(mapping.tool_result_text(text))
