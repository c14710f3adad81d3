"""Run by the project's python (it needs the gym's `trl` extra): warm the tiny model up on counter tool
calls against a running gym (`tiny_counter_recipe`, the CPU training test's), save it where
`gym-server policy serve --model DIR` loads it, and write its tasks as JSON.

    python warm_policy.py GYM_URL DIR [STEPS [ENV ...]]    # DIR/config.json ..., DIR/tasks.json

STEPS: supervised warm-up steps (default 100, the recipe's, after which many of the calls sampled
at temperature 1 are malformed; the agent peers ask for 300, after which nearly all are well-formed).
ENV: other environments whose first `SUBMIT_TASKS` tasks the model then learns to answer with `submit`
(`SUBMIT_STEPS` more steps, three quarters of their examples counter's episodes, so that counter's
first call stays `add`: with half, a warm-up on a new machine made counter's first call a malformed
`submit` in every episode), so that an agent playing them calls one of their tools: a counter-only
model never called a tool of the agent peers' second environment, workplace.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

import torch

from gym_trainer.chat import ChatRenderer
from gym_trainer.client import SyncGymClient
from gym_trainer.toolcalls import render_tool_call
from gym_trainer.warmup import counter_example, tiny_counter_recipe, warm_up

SUBMIT_STEPS = 150
SUBMIT_TASKS = 4


def main(gym_url: str, folder: Path, steps: int = 100, submit_envs: tuple[str, ...] = ()) -> None:
    torch.set_num_threads(1)  # the model is tiny: a second thread costs more than it gives on a shared CPU
    model, tokenizer, train, _ = tiny_counter_recipe(gym_url, n_tasks=4, steps=steps)
    if submit_envs:
        renderer = ChatRenderer(tokenizer)
        call = [*renderer.encode(render_tool_call("submit", {})), int(tokenizer.eos_token_id)]
        prompts = [
            renderer.render_prompt(*opening).ids for env in submit_envs for opening in _openings(gym_url, env)
        ]
        counter = counter_example(tokenizer, train)

        def example(rng: random.Random) -> tuple[list[int], list[int]]:
            if rng.random() < 0.75:  # counter's episodes too, or its first call turns into `submit`
                return counter(rng)
            prompt = rng.choice(prompts)
            return prompt + call, [-100] * len(prompt) + call

        warm_up(model, tokenizer, example, steps=SUBMIT_STEPS)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    tasks = [{"task": t["task"], "seed": t["seed"]} for t in train]
    (folder / "tasks.json").write_text(json.dumps(tasks))


def _openings(gym_url: str, env: str) -> list[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """The opening messages and tools of `env`'s first `SUBMIT_TASKS` tasks (seed 0), the ones the agent
    peers play among them. Tasks differ in their system prompt's details and request: a model that learned
    `submit` on one task wrote counter's `add` on another (workplace-00072 against workplace-00000, a
    build on an AVX-512 machine, 2026-12-07), so it learns several."""
    openings = []
    with SyncGymClient(gym_url) as gym:
        for task in gym.all_tasks(env)[:SUBMIT_TASKS]:
            session = gym.create_session(env, task_id=task["id"], seed=0, run="warmup-probe")
            gym.close(session.session_id)
            openings.append((session.messages, session.tools))
    return openings


if __name__ == "__main__":
    args = sys.argv[1:]
    main(args[0], Path(args[1]), int(args[2]) if len(args) > 2 else 100, tuple(args[3:]))
