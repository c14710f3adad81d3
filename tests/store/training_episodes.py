"""A store of known multi-turn episodes for the training-set exports (the store and the TRL tests share it).

Run `r1`, env `counter`:
- `count-a`: three clean episodes from one opening, rewards 1.0 (3 turns), 1.0 (2 turns, the best: fewer
  turns) and 0.0; one more at 1.0 from another opening (a different seed), alone in its group;
- `count-b`: 0.5 and 0.25 (under an SFT threshold of 1.0; a pair only with a margin of 0.25 or less);
- `count-c`: 1.0 but cut by `max_turns`, and 1.0 still live: neither counts.
Run `r2`: one more clean 1.0 episode of `count-a` by another policy.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from store.test_export import store_records

from gym_server.store.records import TrajectoryRecord, TrajectoryStatus

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add a number to the counter.",
            "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
        },
    }
]
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def opening(target: int) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You count with the add tool."},
        {"role": "user", "content": f"Bring the counter to {target}."},
    ]


def turns(adds: list[int], answer: str) -> list[dict[str, Any]]:
    """Assistant tool calls and their tool replies, a final answer, then the environment's closing note."""
    messages: list[dict[str, Any]] = []
    for index, n in enumerate(adds):
        call = {
            "id": f"c{index}",
            "type": "function",
            "function": {"name": "add", "arguments": json.dumps({"n": n})},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append(
            {"role": "tool", "tool_call_id": f"c{index}", "content": f"counter is {sum(adds[: index + 1])}"}
        )
    messages.append({"role": "assistant", "content": answer})
    messages.append({"role": "user", "content": "(the episode is over)"})
    return messages


def episode(
    ident: str,
    task_id: str,
    reward: float,
    adds: list[int],
    *,
    target: int = 3,
    run: str = "r1",
    model: str = "tiny",
    status: TrajectoryStatus = TrajectoryStatus.COMPLETED,
    failure: str | None = None,
    order: int = 0,
) -> TrajectoryRecord:
    return TrajectoryRecord(
        id=ident,
        run=run,
        env="counter",
        env_version="v1",
        task_id=task_id,
        seed=target,
        status=status,
        failure=failure,
        messages=opening(target) + turns(adds, f"done: {sum(adds)}"),
        tools=TOOLS,
        reward=reward,
        policy={"model": model, "weight_version": 1},
        num_turns=len(adds) + 1,
        created_at=EPOCH + timedelta(seconds=order),
    )


def known_episodes() -> list[TrajectoryRecord]:
    return [
        episode("a-long", "count-a", 1.0, [1, 1, 1], order=1),
        episode("a-best", "count-a", 1.0, [2, 1], order=2),
        episode("a-wrong", "count-a", 0.0, [5], order=3),
        episode("a-other-seed", "count-a", 1.0, [4], target=4, order=4),
        episode("b-half", "count-b", 0.5, [1, 1], order=5),
        episode("b-quarter", "count-b", 0.25, [1], order=6),
        episode(
            "c-cut", "count-c", 1.0, [1, 1, 1], failure="max_turns", status=TrajectoryStatus.FAILED, order=7
        ),
        episode("c-live", "count-c", 1.0, [3], status=TrajectoryStatus.LIVE, order=8),
        episode("a-r2", "count-a", 1.0, [3], run="r2", model="other", order=9),
    ]


def store_known_episodes(url: str) -> list[TrajectoryRecord]:
    records = known_episodes()
    store_records(url, records)
    return records
