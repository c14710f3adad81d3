"""Write a verl dataset (parquet) whose rows are gym tasks, for `GymAgentLoop` or the reward functions.

Each row: `prompt` (the task's text as a user message: verl's dataset needs one; the episode's real
opening messages come from the gym session), `data_source` (the env), `agent_name` (`gym_agent`, so
verl plays the row with the gym's agent loop), `reward_model.ground_truth` (the task id, for the
single-turn reward functions) and `extra_info` (`gym_env`, `gym_task_id`, `gym_seed`, `index`).

    python examples/verl/make_dataset.py --gym http://127.0.0.1:8000 --env counter --out var/verl
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from gym_trainer.client import SyncGymClient

AGENT_NAME = "gym_agent"  # GymAgentLoop's registered name (not imported: that would import verl)


def rows(gym: str, env: str, split: str | None) -> list[dict[str, object]]:
    with SyncGymClient(gym) as client:
        tasks = client.all_tasks(env, split=split)
    return [
        {
            "prompt": [{"role": "user", "content": task["prompt"]}],
            "data_source": env,
            "agent_name": AGENT_NAME,
            "reward_model": {"style": "rule", "ground_truth": task["id"]},
            "extra_info": {"gym_env": env, "gym_task_id": task["id"], "gym_seed": index, "index": index},
        }
        for index, task in enumerate(tasks)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gym", default="http://127.0.0.1:8000")
    parser.add_argument("--env", default="counter")
    parser.add_argument("--out", type=Path, default=Path("var/verl"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for split, name in (("train", "train"), ("validation", "val")):
        table = pa.Table.from_pylist(rows(args.gym, args.env, split))
        pq.write_table(table, args.out / f"{name}.parquet")
        print(f"{args.out / f'{name}.parquet'}: {table.num_rows} rows")


if __name__ == "__main__":
    main()
