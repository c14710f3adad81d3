"""TRL's `environment_factory` inside a real `GRPOTrainer`: the tiny model, a real gym server process,
TRL's own tool loop, and a reward that rises.

The gym's environment class comes from `make_environment_factory`; TRL renders its methods as tools,
parses the model's calls with the response template `use_hermes_response_template` sets, calls the
methods (each a gym step), and scores every rollout with the environment's `get_reward` (the gym's
verdict). The task is the CPU training test's: counter episodes whose target is the start value plus 3,
after a supervised warm-up on `add(k)`, k in 1..4, then `submit`, rendered exactly as TRL renders the
prompt (the dataset's system and user messages, the tools from the methods' schemas); GRPO must find k=3.
The reward TRL logs for each step must be the mean of the rewards the gym stored for that step's sessions.
Measured (seed 0, 2-core machine under heavy load): first five steps 0.34, last five 0.74; with
30 steps 0.36 -> 0.84 (docs/trl.md).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import ServerProcess
from grpotest import cpu_grpo_config, rise, train_quietly
from gymtest import stored_run

from gym_trainer.client import SyncGymClient
from gym_trainer.warmup import counter_offset_tasks, warm_up_counter

pytestmark = [pytest.mark.slow, pytest.mark.heavy, pytest.mark.timeout(1800)]

OFFSET = 3
STEPS = 20
BATCH = 16
MARGIN = 0.2
RUN = "trl-environment-factory"


@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning", "ignore::DeprecationWarning")
def test_grpo_with_environment_factory_raises_the_gym_reward(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    pytest.importorskip("trl")
    from transformers.utils.chat_template_utils import get_json_schema
    from trl.trainer.grpo_trainer import GRPOTrainer

    from datasets import Dataset
    from gym_trainer.models import build_tiny_model, build_tiny_tokenizer
    from gym_trainer.trl import make_environment_factory, use_hermes_response_template

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    server = server_factory(f"sqlite:///{tmp_path / 'gym.db'}", GYM_LOG_LEVEL="warning")
    server.start()
    tokenizer = use_hermes_response_template(build_tiny_tokenizer())
    model = build_tiny_model(tokenizer, seed=0)
    factory = make_environment_factory(server.url, "counter", run=RUN)
    probe = factory()
    # The tools as TRL renders them: the public methods in name order, through transformers' schemas.
    tools = [get_json_schema(getattr(probe, name)) for name in sorted(("add", "read", "submit"))]
    with SyncGymClient(server.url) as gym:
        tasks = counter_offset_tasks(gym, 8, offset=OFFSET)
    losses = warm_up_counter(model, tokenizer, [{**t, "tools": tools} for t in tasks], steps=100)
    assert losses[-1] < 0.5

    rows = [
        {
            "prompt": [t["opening"][0], {"role": "user", "content": t["task"]["prompt"]}],
            "gym_task": json.dumps(t["task"]),
            "gym_seed": t["seed"],
        }
        for t in tasks
    ]
    args = cpu_grpo_config(
        tmp_path / "out", steps=STEPS, per_device_train_batch_size=BATCH, max_tool_calling_iterations=3
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[],  # the environment's get_reward is the only reward source
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        environment_factory=factory,
    )
    logs = train_quietly(trainer)
    rewards = [float(entry["reward"]) for entry in logs]
    assert len(rewards) == STEPS
    assert all(entry["tools/call_frequency"] > 0 for entry in logs)  # TRL ran the gym's tools
    assert rise(rewards) >= MARGIN, f"reward did not rise: {rewards}"

    # Every rollout was one gym session of this run, and TRL's reward is the gym's stored verdict.
    page = stored_run(server.url, RUN, STEPS * BATCH)
    items = sorted(page["items"], key=lambda item: item["created_at"])
    stored = [float(item["reward"] or 0.0) for item in items]
    per_step = [sum(stored[i : i + BATCH]) / BATCH for i in range(0, len(stored), BATCH)]
    assert per_step == pytest.approx(rewards)
    assert {item["status"] for item in items} <= {"completed", "abandoned"}
