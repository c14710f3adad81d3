"""TRL GRPO trains a user's own agent on a CPU: `AgentRolloutFunc` runs an unmodified ReAct agent
(tests/react_agent.py: the plain `openai` client for the model, the `mcp` client for the environment's
tools, the loop a LangGraph `create_react_agent` graph runs) through each episode's gateway and MCP URL,
against the trainer's own model served in-process, and the gym's reward rises.

Why not LangGraph itself here: langgraph, langchain-openai and langchain-mcp-adapters pin `mcp<2`, which
the project's environment (mcp 2.x for its facade) cannot hold; the same training loop with a real
LangGraph graph is the langgraph peer's (tests/interop/langgraph, its own venv). See
docs/agents-langgraph.md.

The task is test_trl_training's: counter episodes whose target is the start value plus 3; the tiny model
is first warmed up on calls adding 1, 2, 3 or 4 (about 25 % success) and GRPO must find the amount the
gym rewards. The assertion asks for a rise of at least `MARGIN` between the first and the last steps.
Seen once (2026-11-27, seed 0, the shared 2-core machine at load 12-20): step means 0.44, 0.38, 0.31,
0.25, 0.31, 0.25, then 0.81 at step 7 (12 of 16 episodes `add(3)`, `submit`); passed, 1,598 s in all
with the warm-up (under that load the warm-up alone took minutes), hence a timeout of its own.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import ServerProcess

from gym_server.trainer_adapters.client import SyncGymClient
from gym_server.trainer_adapters.warmup import counter_offset_tasks, warm_up_counter

pytestmark = [pytest.mark.slow, pytest.mark.heavy, pytest.mark.timeout(1800)]

OFFSET = 3
AMOUNTS = (1, 2, 3, 4)
STEPS = 20
WINDOW = 5
MARGIN = 0.2


@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning", "ignore::DeprecationWarning")
def test_grpo_raises_the_reward_of_an_unmodified_agent(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    pytest.importorskip("trl")
    pytest.importorskip("openai")
    pytest.importorskip("mcp")
    from datasets import Dataset
    from react_agent import react_agent
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from trl.trainer.grpo_config import GRPOConfig
    from trl.trainer.grpo_trainer import GRPOTrainer

    from gym_server.trainer_adapters.models import build_tiny_model, build_tiny_tokenizer
    from gym_server.trainer_adapters.trl import AgentRolloutFunc, gym_prompt, gym_reward

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    server = server_factory(f"sqlite:///{tmp_path / 'gym.db'}", GYM_LOG_LEVEL="warning")
    server.start(timeout_s=120)
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer, seed=0)
    with SyncGymClient(server.url) as gym:
        tasks = counter_offset_tasks(gym, 8, offset=OFFSET)
    assert warm_up_counter(model, tokenizer, tasks, amounts=AMOUNTS, steps=100)[-1] < 0.5

    dataset = Dataset.from_list(
        [
            {"prompt": gym_prompt("counter", t["task"]["prompt"], task=t["task"], seed=t["seed"])}
            for t in tasks
        ]
    )
    rollout = AgentRolloutFunc(server.url, react_agent, run="grpo-agent-test", seed=0)
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=16,
        num_generations=8,
        max_completion_length=128,
        learning_rate=1e-3,
        max_steps=STEPS,
        logging_steps=1,
        beta=0.0,
        seed=0,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[gym_reward],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=rollout,
    )
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    try:
        trainer.train()
    finally:
        rollout.close()

    rewards = [float(entry["reward"]) for entry in trainer.state.log_history if "reward" in entry]
    assert len(rewards) == STEPS
    first, last = sum(rewards[:WINDOW]) / WINDOW, sum(rewards[-WINDOW:]) / WINDOW
    assert last - first >= MARGIN, f"reward did not rise: {rewards}"
    assert [h["mean_reward"] for h in rollout.history] == pytest.approx(rewards)  # TRL saw the gym's reward
    # The agent played multi-call episodes and TRL trained on the gateway's samples, not on a rendering.
    assert all(r.token_exact and r.num_calls >= 2 for r in rollout.last_rollouts if r.reward == 1.0)
