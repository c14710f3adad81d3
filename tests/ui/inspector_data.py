"""A small store with known numbers for the inspector's tests: three runs, a compare, a showcase episode.

- `baseline` (policy tiny-a, verifier v1): tasks t1..t4 score 1, 0, 1, 0.5, and one more t2 episode
  failed with `sandbox_timeout` (no reward): 5 trajectories, mean reward 0.625, success 2/5, 1 failure.
- `improved` (policy tiny-b, verifier v2): t1..t4 score 1, 1, 0, 0.75: mean 0.6875, success 2/4. Against
  baseline, t2 (+1) and t4 (+0.25) got better, t3 (-1) worse, t1 unchanged.
- `math-run` (env math, 10 November): one episode, before the others.
- `hostile` (baseline's t3): markup and script in a message, a fence, a tool name and bad arguments.
- `showcase` (baseline's t1): a tool call with Python code, a 60-line tool result, token data per turn,
  and two re-scores (1 -> 0.5 -> 1).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from gym_server.store.migrate import make_engine, upgrade_database
from gym_server.store.records import TrajectoryRecord, TrajectoryStatus
from gym_server.store.repository import add_rescore, upsert_trajectories

SHOWCASE = "showcase"
BASELINE_DAY = datetime(2026, 11, 20, 10, tzinfo=UTC)
LONG_OUTPUT = "\n".join(f"line {n}" for n in range(60))

_CODE = "def add(a, b):\n    return a + b\n\nprint(add(2, 3))"
SHOWCASE_MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You can run Python with run_python."},
    {"role": "user", "content": "What is 2 + 3? Use the tool."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "run_python", "arguments": json.dumps({"code": _CODE})},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "name": "run_python", "content": LONG_OUTPUT},
    {"role": "assistant", "content": "The answer is 5:\n```python\nprint(2 + 3)\n```"},
]
# Model and tool output is data, never markup: the page must show these as text and run nothing.
HOSTILE = "hostile"
HOSTILE_MARKUP = '<img src=x onerror="alert(1)"><script>alert(2)</script>'
HOSTILE_MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": HOSTILE_MARKUP},
    {
        "role": "assistant",
        "content": "```</pre><script>alert(3)</script>\nx = 1\n```",
        "tool_calls": [
            {
                "id": "<b>id</b>",
                "type": "function",
                "function": {"name": "<i>tool</i>", "arguments": "{not json"},
            }
        ],
    },
]
SHOWCASE_TURNS: list[dict[str, Any]] = [
    {"turn": 0, "prompt_ids": list(range(40)), "env_ids": [], "completion_ids": list(range(12))},
    {"turn": 1, "env_ids": list(range(70)), "completion_ids": list(range(9)), "finish_reason": "stop"},
]


def _record(run: str, task: str, reward: float | None, at: datetime, **fields: Any) -> TrajectoryRecord:
    policy = {"model": "tiny-b" if run == "improved" else "tiny-a", "weight_version": "1"}
    values: dict[str, Any] = {
        "id": f"{run}-{task}-{at:%H%M%S}",
        "run": run,
        "env": "tool_call",
        "env_version": "ev1",
        "task_id": task,
        "status": TrajectoryStatus.COMPLETED,
        "reward": reward,
        "components": {} if reward is None else {"correct": reward},
        "verifier_version": "v2" if run == "improved" else "v1",
        "policy": policy,
        "messages": [
            {"role": "user", "content": f"{task} for {run}"},
            {"role": "assistant", "content": "ok"},
        ],
        "num_turns": 1,
        "created_at": at,
        "finished_at": at + timedelta(seconds=3),
    }
    values.update(fields)
    return TrajectoryRecord(**values)


def populate(url: str) -> None:
    """Upgrade the database at `url` and write the store this module describes."""
    upgrade_database(url)
    day = BASELINE_DAY
    records = [
        _record(
            "baseline",
            "t1",
            1.0,
            day,
            id=SHOWCASE,
            messages=SHOWCASE_MESSAGES,
            turns=SHOWCASE_TURNS,
            num_turns=2,
            metadata={"group": "g-7"},
        ),
        _record("baseline", "t2", 0.0, day + timedelta(minutes=10)),
        _record("baseline", "t3", 1.0, day + timedelta(minutes=20), id=HOSTILE, messages=HOSTILE_MESSAGES),
        _record("baseline", "t4", 0.5, day + timedelta(minutes=30)),
        _record(
            "baseline",
            "t2",
            None,
            day + timedelta(minutes=40),
            status=TrajectoryStatus.FAILED,
            failure="sandbox_timeout",
        ),
    ]
    improved = day + timedelta(days=1)
    for offset, (task, reward) in enumerate({"t1": 1.0, "t2": 1.0, "t3": 0.0, "t4": 0.75}.items()):
        records.append(_record("improved", task, reward, improved + timedelta(minutes=10 * offset)))
    records.append(_record("math-run", "m1", 1.0, datetime(2026, 11, 10, tzinfo=UTC), env="math"))
    engine = make_engine(url)
    try:
        with Session(engine) as session, session.begin():
            upsert_trajectories(session, records)
            session.flush()
            for reward, version in ((0.5, "v1.1"), (1.0, "v2")):
                components = {"correct": reward, "format": 1.0}
                add_rescore(session, SHOWCASE, reward=reward, components=components, verifier_version=version)
    finally:
        engine.dispose()
