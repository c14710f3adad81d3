"""The tiny demo's tasks: counter tasks whose prompt names the amount to add, a tokenizer in which their
prompt is short enough for the tiny model to read, and a warm-up that shows the right amount in a share of
its examples only."""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import ServerProcess
from gymtest import call

from gym_trainer.chat import ChatRenderer
from gym_trainer.client import SyncGymClient
from gym_trainer.models import build_tiny_tokenizer
from gym_trainer.toolcalls import render_tool_call
from gym_trainer.warmup import AMOUNT_PROMPT, counter_amount_tasks, counter_example, counter_vocabulary

pytest.importorskip("transformers")

AMOUNTS = (1, 2, 3, 4)


@pytest.fixture
def amount_tasks(server_factory: Callable[..., ServerProcess], tmp_path: Path) -> list[dict[str, Any]]:
    """8 held-out amount tasks of a real gym (two of each amount), and the gym's url as `url` of each."""
    server = server_factory(f"sqlite:///{tmp_path / 'gym.db'}", GYM_LOG_LEVEL="warning")
    server.start()
    with SyncGymClient(server.url) as gym:
        tasks = counter_amount_tasks(gym, 8, AMOUNTS, first_seed=1000, prefix="heldout")
    return [{**t, "url": server.url} for t in tasks]


def test_a_task_is_solved_by_the_amount_its_prompt_names_and_no_one_call_solves_more_than_a_quarter(
    amount_tasks: list[dict[str, Any]],
) -> None:
    assert [t["task"]["id"] for t in amount_tasks] == [f"heldout-{seed}" for seed in range(1000, 1008)]
    for entry in amount_tasks:
        assert entry["task"]["prompt"] == f"{AMOUNT_PROMPT}{entry['amount']}"
        assert entry["task"]["answer"] == entry["start"] + entry["amount"]
    for k in AMOUNTS:  # a policy blind to its prompt solves the tasks of one amount
        assert sum(t["task"]["answer"] == t["start"] + k for t in amount_tasks) == 2
    entry = amount_tasks[1]
    with SyncGymClient(entry["url"]) as gym:  # and the gym agrees: the named amount scores 1, another 0
        for k, reward in ((entry["amount"], 1.0), (entry["amount"] + 1, 0.0)):
            session = gym.create_session("counter", task=entry["task"], seed=entry["seed"])
            gym.step(session.session_id, call("add", {"amount": k}))
            assert gym.step(session.session_id, call("submit", {}, "c1")).reward == reward


def test_the_vocabulary_makes_the_prompt_a_few_dozen_tokens_and_renders_it_exactly(
    amount_tasks: list[dict[str, Any]],
) -> None:
    entry = amount_tasks[2]
    opening = [entry["opening"][0], {"role": "user", "content": entry["task"]["prompt"]}]
    plain, own = build_tiny_tokenizer(), build_tiny_tokenizer(counter_vocabulary(entry))
    long, short = (ChatRenderer(t).render_prompt(opening, entry["tools"]).ids for t in (plain, own))
    assert len(long) > 800 and len(short) < 32
    text = plain.apply_chat_template(
        opening, tools=entry["tools"], tokenize=False, add_generation_prompt=True
    )
    assert own.decode(short) == plain.decode(long) == text
    # The amount is its own token, the one the call's argument is written with, near the prompt's end.
    digit = own.encode(str(entry["amount"]), add_special_tokens=False)
    assert len(digit) == 1 and digit[0] in short[-8:]
    call_ids = own.encode(render_tool_call("add", {"amount": entry["amount"]}), add_special_tokens=False)
    assert digit[0] in call_ids
    # Every text still round-trips, and the old tokens keep their ids (appended, never reordered).
    assert own.decode(own.encode("héllo 🚀 -10..10", add_special_tokens=False)) == "héllo 🚀 -10..10"
    assert all(own.convert_tokens_to_ids(t) == plain.convert_tokens_to_ids(t) for t in plain.get_vocab())


@pytest.mark.parametrize(("share", "expected"), [(0.0, 0.25), (0.25, 0.25 + 0.75 / 4), (1.0, 1.0)])
def test_the_warm_up_shows_the_tasks_own_amount_in_its_share_of_examples(
    amount_tasks: list[dict[str, Any]], share: float, expected: float
) -> None:
    tokenizer = build_tiny_tokenizer(counter_vocabulary(amount_tasks[0]))
    example = counter_example(tokenizer, amount_tasks, AMOUNTS, right_share=share)
    rng, right = random.Random(0), 0
    for _ in range(2000):
        ids, labels = example(rng)
        text = tokenizer.decode(ids)
        named = re.search(re.escape(AMOUNT_PROMPT) + r"(\d)", text)
        written = re.search(r'"amount": (-?\d+)', tokenizer.decode([i for i in labels if i >= 0]))
        assert named and written
        right += named.group(1) == written.group(1)
    assert right / 2000 == pytest.approx(expected, abs=0.035)
