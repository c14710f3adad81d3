"""Run by the project's python (it needs the gym's `trl` extra): warm the tiny model up on counter tool
calls against a running gym (the recipe of `gym-server demo --model tiny`), save it where
`gym-server policy serve --model DIR` loads it, and write its tasks as JSON.

    python warm_policy.py GYM_URL DIR    # DIR/config.json ..., DIR/tasks.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from gym_server.trainer_adapters.warmup import tiny_counter_recipe


def main(gym_url: str, folder: Path) -> None:
    torch.set_num_threads(1)  # the model is tiny: a second thread costs more than it gives on a shared CPU
    model, tokenizer, train, _ = tiny_counter_recipe(gym_url, n_tasks=4)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    tasks = [{"task": t["task"], "seed": t["seed"]} for t in train]
    (folder / "tasks.json").write_text(json.dumps(tasks))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
