"""The NeMo Gym environment family's own rules, without a resources server: manifests, rows as tasks,
tools and the transcript as the `response` its verify reads. A real nemo-gym 0.4.0 server is played in
tests/interop/nemo-gym (`make interop PEER=nemo-gym`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gym_env_nemo_gym.env import MANIFESTS_VARIABLE, environments, nemo_gym_environment
from gym_env_nemo_gym.rows import openai_tools, prompt_messages, responses_output
from gym_server.core.errors import BackendUnavailable
from gym_server.sdk.tasks import Task, TaskFieldError

ROW = {
    "responses_create_params": {
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "add 1"}]}],
        "tools": [
            {
                "type": "function",
                "name": "increment_counter",
                "description": "",
                "parameters": {"type": "object"},
            },
            {"type": "web_search"},
        ],
    },
    "expected_count": 4,
}


def write_manifest(folder: Path, **server: Any) -> Path:
    (folder / "rows.jsonl").write_text(json.dumps(ROW) + "\n\n" + json.dumps(ROW) + "\n")
    manifest = {
        "name": "demo",
        "description": "a demo",
        "server": {"url": "http://127.0.0.1:9", **server},
        "splits": {"train": "rows.jsonl"},
    }
    path = folder / "manifest.json"
    path.write_text(json.dumps(manifest))
    return path


def test_a_manifest_makes_a_class_whose_tasks_are_the_rows(tmp_path: Path) -> None:
    env_cls = nemo_gym_environment(write_manifest(tmp_path))
    assert env_cls.name == "nemo_gym/demo" and env_cls.max_turns == 16
    tasks = env_cls.dataset().tasks("train")
    assert [task.id for task in tasks] == ["train-0000", "train-0001"]
    assert tasks[0].prompt == [{"role": "user", "content": "add 1"}] and tasks[0].answer == ROW
    assert env_cls.dataset().files() == [tmp_path / "rows.jsonl"]


def test_the_family_reads_the_manifests_named_in_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = write_manifest(tmp_path)
    broken = tmp_path / "broken.json"
    broken.write_text('{"name": "Bad Name"}')
    monkeypatch.setenv(MANIFESTS_VARIABLE, f"{good}:{broken}:{tmp_path / 'missing.json'}")
    assert [cls.name for cls in environments()] == ["nemo_gym/demo"]  # the broken ones are logged, skipped
    monkeypatch.delenv(MANIFESTS_VARIABLE)
    assert environments() == []


def test_tools_and_prompts_in_the_gyms_terms() -> None:
    assert openai_tools(ROW) == [
        {"type": "function", "function": {"name": "increment_counter", "parameters": {"type": "object"}}}
    ]
    assert prompt_messages({"responses_create_params": {"input": "hello"}}) == [
        {"role": "user", "content": "hello"}
    ]


def test_the_transcript_is_the_responses_output_verify_reads() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "add 1"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "inc", "arguments": '{"count":1}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "inc", "content": '{"success":true}'},
        {"role": "assistant", "content": "done"},
    ]
    assert responses_output(messages) == [
        {"type": "function_call", "call_id": "c1", "name": "inc", "arguments": '{"count":1}'},
        {"type": "function_call_output", "call_id": "c1", "output": '{"success":true}'},
        {
            "id": "msg_3",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "done", "annotations": []}],
        },
    ]


def test_an_inline_task_must_be_a_row(tmp_path: Path) -> None:
    env_cls = nemo_gym_environment(write_manifest(tmp_path))
    with pytest.raises(TaskFieldError, match="NeMo Gym row"):
        env_cls.check_task(Task(id="t", prompt="x", answer={"expected_count": 1}))


async def test_an_unreachable_server_refuses_the_episode(tmp_path: Path) -> None:
    env_cls = nemo_gym_environment(write_manifest(tmp_path, timeout_s=2))  # port 9: nothing listens
    env = env_cls(env_cls.dataset().tasks("train")[0])
    with pytest.raises(BackendUnavailable, match="did not seed the episode"):
        await env.reset()
    await env.close()
