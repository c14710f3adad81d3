"""Train with ART (openpipe-art 0.5.23, Python >= 3.12) on gym episodes: a GPU host, a running gym.

NOT run in this repository (no GPU here; docs/art.md says what is proven on a CPU). ART's `LocalBackend`
serves the model with vLLM and trains LoRA adapters with Unsloth on the GPU; each step gathers groups of
gym episodes through the model's OpenAI-compatible client, optionally re-scores them with RULER, and
trains on them.

    pip install 'openpipe-art[backend]==0.5.23' gym-server
    python examples/art/train_art_gym.py --gym http://127.0.0.1:8000 --env counter \\
        --base-model Qwen/Qwen2.5-0.5B-Instruct --steps 20 [--ruler-judge openai/o4-mini]
"""

from __future__ import annotations

import argparse
import asyncio
import random

import art
from art.local import LocalBackend
from art.rewards import ruler_score_group

from gym_trainer.art import GymRolloutConfig, gym_trajectory_groups
from gym_trainer.client import GymClient
from gym_trainer.episodes import EpisodeSpec


async def main(args: argparse.Namespace) -> None:
    model = art.TrainableModel(
        name=args.name, run_name=args.run, project="gym-server", base_model=args.base_model
    )
    backend = LocalBackend()
    await model.register(backend)
    config = GymRolloutConfig(max_turns=args.max_turns, completion={"max_tokens": 512}, run=args.run)
    rng = random.Random(0)
    async with GymClient(args.gym) as gym:
        tasks = await gym.all_tasks(args.env, split="train")
        for step in range(args.steps):
            picked = rng.sample(tasks, min(args.groups, len(tasks)))
            specs = [EpisodeSpec(args.env, task_id=task["id"], seed=step) for task in picked]
            groups = await gym_trajectory_groups(
                model, gym, specs, args.group_size, config, max_exceptions=0.25
            )
            if args.ruler_judge:  # RULER's relative scores replace the gym's (kept as independent_reward)
                judged = [
                    await ruler_score_group(g, args.ruler_judge, swallow_exceptions=True) for g in groups
                ]
                groups = [g for g in judged if g is not None]
            rewards = [t.reward for g in groups for t in g]
            mean = sum(rewards) / max(1, len(rewards))
            print(f"step {step}: mean reward {mean:.3f} over {len(rewards)} episodes")
            await backend.train(model, groups, learning_rate=args.lr)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="ART on gym episodes (GPU)")
    parser.add_argument("--gym", default="http://127.0.0.1:8000")
    parser.add_argument("--env", default="counter")
    parser.add_argument("--base-model", default="Qwen/Qwen2.5-0.5B-Instruct")
    parser.add_argument("--name", default="gym-agent")
    parser.add_argument("--run", default="art-gym")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=8)
    parser.add_argument("--lr", type=float, default=5e-6)
    parser.add_argument("--ruler-judge", default=None, help="a LiteLLM model name, e.g. openai/o4-mini")
    asyncio.run(main(parser.parse_args()))
