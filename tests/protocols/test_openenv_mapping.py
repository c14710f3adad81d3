"""The OpenEnv facade's translation rules, without a server: actions, resets, errors, observations."""

from __future__ import annotations

from typing import Any

import pytest

from gym_server.core.errors import (
    AtCapacity,
    EnvironmentNotFound,
    SessionExpired,
    SessionFinished,
    TaskNotFound,
)
from gym_server.protocols.openenv import mapping
from gym_server.sessions.live import StepResult


def test_call_tool_list_tools_and_message_actions_parse() -> None:
    call = mapping.parse_action({"type": "call_tool", "tool_name": "add", "arguments": {"amount": 3}})
    assert isinstance(call, mapping.CallTool)
    assert (call.tool_name, call.arguments) == ("add", {"amount": 3})
    assert isinstance(mapping.parse_action({"type": "list_tools"}), mapping.ListTools)
    sent = mapping.parse_action({"type": "message", "message": {"role": "assistant", "content": "42"}})
    assert isinstance(sent, mapping.SendMessage)
    assert sent.message.to_dict() == {"role": "assistant", "content": "42"}


@pytest.mark.parametrize(
    "action",
    [
        {"type": "bogus"},
        {"tool_name": "add"},  # no type
        {"type": "call_tool"},  # no tool name
        {"type": "call_tool", "tool_name": "add", "arguments": "{}"},  # arguments must be an object
        {"type": "call_tool", "tool_name": "add", "extra": 1},
        {"type": "message", "message": {"role": "user", "content": "hi"}},  # only assistant messages step
        "read",
        None,
    ],
)
def test_malformed_actions_are_validation_errors_with_pydantic_errors(action: Any) -> None:
    with pytest.raises(mapping.ActionError) as caught:
        mapping.parse_action(action)
    assert caught.value.code == mapping.VALIDATION_ERROR
    assert caught.value.errors and all({"type", "loc", "msg"} <= set(e) for e in caught.value.errors)


def test_reset_accepts_openenv_and_gym_fields_and_refuses_others() -> None:
    params = mapping.parse_reset({"seed": 7, "episode_id": "e-1", "task_id": "counter-0001", "run": "r"})
    assert (params.seed, params.episode_id, params.task_id, params.run) == (7, "e-1", "counter-0001", "r")
    assert mapping.parse_reset(None) == mapping.ResetParams()
    for bad in ({"seed": -1}, {"seed": "x"}, {"temperature": 1.0}, [1, 2]):
        with pytest.raises(mapping.ActionError) as caught:
            mapping.parse_reset(bad)
        assert caught.value.code == mapping.VALIDATION_ERROR


@pytest.mark.parametrize(
    ("error", "opening", "code", "status"),
    [
        (AtCapacity(4, 2), True, mapping.CAPACITY_REACHED, 429),
        (EnvironmentNotFound("nope"), True, mapping.FACTORY_ERROR, 404),
        (TaskNotFound("counter", "t-9"), True, mapping.FACTORY_ERROR, 404),
        (SessionFinished("s", "submitted"), False, mapping.SESSION_ERROR, 409),
        (SessionExpired("s"), False, mapping.SESSION_ERROR, 410),
    ],
)
def test_gym_errors_become_openenv_error_codes_with_the_problem(
    error: Any, opening: bool, code: str, status: int
) -> None:
    data = mapping.gym_error_data(error, opening=opening)
    assert data["code"] == code
    assert data["message"] == error.detail
    assert data["problem"]["status"] == status


def test_capacity_error_carries_openenv_max_sessions_and_retry_after() -> None:
    data = mapping.gym_error_data(AtCapacity(4, 2), opening=True)
    assert data["max_sessions"] == 4
    assert data["problem"]["retry_after_s"] == 2


def _result(content: str, done: bool = False, reward: float | None = None) -> StepResult:
    return StepResult(
        messages=[{"role": "tool", "tool_call_id": "c", "content": content}],
        done=done,
        reward=reward,
        info={},
    )


def test_a_tool_reply_is_a_call_tool_observation_whose_data_is_the_text() -> None:
    action = mapping.CallTool(type="call_tool", tool_name="read")
    answer = mapping.step_result("s1", action, _result("20"))
    observation = answer["observation"]
    assert observation["tool_name"] == "read"
    assert observation["error"] is None
    assert observation["result"]["data"] == "20"
    assert observation["result"]["content"] == [{"type": "text", "text": "20"}]
    assert (answer["reward"], answer["done"]) == (None, False)


@pytest.mark.parametrize(
    ("text", "error_type"),
    [
        ("Error: unknown tool 'nope'; available tools: read.", "tool_not_found"),
        ("Error: invalid arguments for 'add': amount: bad.", "invalid_args"),
        ("Error: arguments for 'add' are not valid JSON (x).", "invalid_args"),
        ("Error: tool 'add' timed out after 5 s.", "timeout"),
        ("Error: amount must be between -10 and 10, got 50", "execution_error"),
    ],
)
def test_an_error_tool_message_is_openenv_tool_error(text: str, error_type: str) -> None:
    action = mapping.CallTool(type="call_tool", tool_name="add")
    observation = mapping.step_result("s1", action, _result(text))["observation"]
    assert observation["result"] is None
    assert observation["error"] == {"error_type": error_type, "message": text}


def test_the_final_step_carries_the_reward_at_top_level_and_in_metadata() -> None:
    action = mapping.CallTool(type="call_tool", tool_name="submit")
    answer = mapping.step_result("s1", action, _result("submitted 26", done=True, reward=1.0))
    assert (answer["reward"], answer["done"]) == (1.0, True)
    episode = answer["observation"]["metadata"][mapping.EPISODE_META_KEY]
    assert episode == {"session_id": "s1", "done": True, "reward": 1.0, "info": {}}


def test_a_message_action_answers_the_reply_messages() -> None:
    action = mapping.parse_action({"type": "message", "message": {"role": "assistant", "content": "7"}})
    assert isinstance(action, mapping.SendMessage)
    answer = mapping.step_result("s1", action, _result("ok"))
    assert answer["observation"]["messages"] == [{"role": "tool", "tool_call_id": "c", "content": "ok"}]
