"""Write OpenRLHF's prompt dataset for a gym environment: one JSONL row per task, the task in `label`.

python examples/openrlhf/make_dataset.py --gym http://127.0.0.1:8000 --env counter --out counter.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gym_trainer.client import SyncGymClient
from gym_trainer.openrlhf import gym_prompt_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gym", default="http://127.0.0.1:8000")
    parser.add_argument("--env", default="counter")
    parser.add_argument("--split", default="train")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    with SyncGymClient(args.gym) as gym:
        rows = gym_prompt_rows(gym, args.env, split=args.split, limit=args.limit)
    args.out.write_text("".join(json.dumps(row) + "\n" for row in rows))
    print(f"{len(rows)} rows -> {args.out}")


if __name__ == "__main__":
    main()
