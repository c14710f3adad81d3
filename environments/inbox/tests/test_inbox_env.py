"""The `inbox` environment: the mailbox, golden transcripts, every family answerable, bad input, the data."""

from __future__ import annotations

import itertools
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from gym_env_inbox import generate
from gym_env_inbox.env import InboxEnv
from gym_env_inbox.questions import FAMILIES, build_episode, date_forms
from gym_env_inbox.scoring import citation_scores, names_distractor
from gym_server.core.settings import JudgeSettings, Settings
from gym_server.sdk.messages import Message
from gym_server.sdk.registry import Registry
from gym_server.sdk.tasks import Task
from gym_verifiers import judging

FIXTURES = Path(__file__).resolve().parent.parent / "gym_env_inbox" / "fixtures" / "golden.jsonl"
GOLDEN = [orjson.loads(line) for line in FIXTURES.read_bytes().splitlines() if line.strip()]
TASKS = InboxEnv.dataset().tasks()
# Two tasks per family: every family's planted answer is checked on a fresh mailbox.
SAMPLE = [
    task
    for family in FAMILIES
    for task in [t for t in TASKS if t.metadata["mailbox"]["family"] == family][:2]
]
_ids = itertools.count()


@pytest.fixture(autouse=True)
async def _rules_only() -> AsyncIterator[None]:
    """No judge configured, whatever the machine's environment says: the rule-based scoring."""
    await judging.start(Settings(judge=JudgeSettings()))
    yield
    await judging.shutdown()


def _call(name: str, arguments: dict[str, Any] | str) -> dict[str, Any]:
    raw = arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()
    call = {"id": f"call_{next(_ids)}", "type": "function", "function": {"name": name, "arguments": raw}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


async def _env(task: Task, seed: int = 0) -> InboxEnv:
    env = InboxEnv(task, seed)
    await env.reset()
    return env


async def _tool(env: InboxEnv, name: str, **arguments: Any) -> Any:
    outcome = await env.step(_call(name, arguments))
    text = str(outcome.messages[0]["content"])
    return orjson.loads(text) if text[:1] == "{" else text


@pytest.mark.parametrize("case", GOLDEN, ids=[case["name"] for case in GOLDEN])
async def test_golden_fixtures_replay_to_their_reward(case: dict[str, Any]) -> None:
    task = InboxEnv.dataset().get(case["task_id"])
    assert task is not None
    env = await _env(task, case["seed"])
    for message in case["messages"]:
        if env.done:
            break
        await env.step(Message.model_validate(message).to_dict())
    result = await env.verify()
    assert result.reward == pytest.approx(case["expected_reward"])
    assert result.components == pytest.approx(case["expected_components"])
    assert result.failure is None and result.info["scored_by"] in ("rules", "gate")


def test_golden_fixtures_cover_full_zero_malformed_and_hedging() -> None:
    by_name = {case["name"]: case["expected_reward"] for case in GOLDEN}
    assert by_name["full_score_search_read_answer"] == 1.0
    assert by_name["zero_score_wrong_answer"] == 0.0
    assert by_name["malformed_calls_then_prose"] == 0.0
    assert by_name["hedging_two_codes"] == 0.0 and by_name["superseded_code_cited_right"] == 0.0
    assert by_name["right_answer_no_citation"] == pytest.approx(0.7)
    assert 0.7 < by_name["right_answer_cites_everything"] < 0.75  # citing everything buys almost nothing


@pytest.mark.parametrize("task", SAMPLE, ids=[task.id for task in SAMPLE])
async def test_the_gold_messages_state_the_answer_and_answering_scores_one(task: Task) -> None:
    env = await _env(task)
    answer = task.answer
    bodies = [
        (await _tool(env, "read_email", message_id=identifier))["body"]
        for identifier in answer["message_ids"]
    ]
    family = task.metadata["mailbox"]["family"]
    if family == "expense_count":
        assert len(bodies) == int(answer["answers"][0])
    elif family == "contract_sender":
        sender = (await _tool(env, "read_email", message_id=answer["message_ids"][0]))["from"]
        assert answer["answers"][0] in sender
    else:
        assert any(form.lstrip("$") in body or form in body for form in answer["answers"] for body in bodies)
    subject = env.emails[answer["message_ids"][0]].subject
    words = [word for word in re.findall(r"[A-Za-z]{4,}", subject) if word not in ("Signed", "Review")][:2]
    found = await _tool(env, "search_inbox", keywords=words)
    assert found["total"] >= 1
    await _tool(env, "answer", text=answer["answers"][0], message_ids=answer["message_ids"])
    result = await env.verify()
    assert env.done and result.reward == 1.0, result.info


async def test_same_task_gives_the_same_mailbox_whatever_the_seed() -> None:
    task = TASKS[1]
    first, again, other = await _env(task, 0), await _env(task, 0), await _env(task, 5)
    assert first.messages == again.messages
    assert [email.full() for email in first.ordered] == [email.full() for email in again.ordered]
    assert [email.id for email in first.ordered] == [email.id for email in other.ordered]  # gold ids hold
    assert 2000 <= len(first.emails) <= 2010
    dates = [email.date for email in first.ordered]
    assert dates == sorted(dates, reverse=True)


async def test_search_filters_and_errors() -> None:
    env = await _env(TASKS[0])
    owner = env.owner.split("<")[1].rstrip(">")
    travel = await _tool(env, "search_inbox", keywords=[], from_addr="skyway")
    assert travel["total"] > 10 and len(travel["results"]) == 10
    assert all("skyway" in row["from"] for row in travel["results"])
    window = await _tool(env, "search_inbox", keywords=["lunch"], after="2024-03-01", before="2024-04-01")
    assert window["total"] > 0 and all("2024-03" in row["date"] for row in window["results"])
    assert (await _tool(env, "search_inbox", keywords=[], to_addr=owner))["total"] > 1000
    for arguments, expected in (
        ({"keywords": []}, "at least one keyword"),
        ({"keywords": ["x"], "after": "March 3"}, "YYYY-MM-DD"),
        ({"keywords": ["x"] * 11}, "Error"),
        ({"keywords": "Lisbon"}, "Error"),
    ):
        assert expected in await _tool(env, "search_inbox", **arguments)
    assert "search_inbox lists" in await _tool(env, "read_email", message_id="m00000000")
    assert "Error" in await _tool(env, "answer", text="x", message_ids=["m1"] * 21)
    assert not env.done


def test_distractor_and_citation_arithmetic() -> None:
    assert names_distractor("It is $44,500.", ["44,500"]) == "44,500"
    assert (
        names_distractor("May 14", ["May 4"]) is None and names_distractor("on may 4", ["May 4"]) == "May 4"
    )
    assert citation_scores(["a", "a", "b"], ["a"]) == {
        "precision": 0.5,
        "recall": 1.0,
        "f1": pytest.approx(2 / 3),
    }
    assert citation_scores([], ["a"])["f1"] == 0.0
    assert "2024-05-14" in date_forms(__import__("datetime").date(2024, 5, 14))


def test_dataset_splits_families_and_generator() -> None:
    assert InboxEnv.dataset().split_sizes() == {"train": 192, "validation": 48}
    for split in ("train", "validation"):
        families = {task.metadata["mailbox"]["family"] for task in InboxEnv.dataset().tasks(split)}
        assert families == set(FAMILIES)
    # Rebuilding every mailbox takes a while on a small machine: a prefix proves the generator's purity.
    rebuilt = generate.build_tasks(count=8)
    for task in rebuilt:
        assert InboxEnv.dataset().get(task.id) == task
    assert "inbox" in Registry([InboxEnv]) and InboxEnv.judge_rubric
    mailbox, question = build_episode(7, "kickoff_room", 50)
    assert len(mailbox.emails) == 52 and question.message_ids[0] in mailbox.by_id()


def test_inline_tasks_are_checked() -> None:
    good = TASKS[0].model_dump()
    InboxEnv.check_task(Task.model_validate(good))
    for broken, field in (
        ({**good, "metadata": {"mailbox": {"seed": 1, "family": "nope"}}}, "family"),
        ({**good, "answer": {"answers": [], "message_ids": ["m1"]}}, "answers"),
    ):
        with pytest.raises(ValueError, match=field):
            InboxEnv.check_task(Task.model_validate(broken))
