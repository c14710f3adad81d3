"""Tree against flat groups: tokens generated and environment steps per training sample (docs/fork.md).

The same policy plays the same tasks at the same number of training samples, `--groups` groups of `--n`:

* **flat**: each group is n whole episodes of its task (`RolloutDriver.run_group`);
* **tree**: each group is one episode, then n-1 forks of it at turns drawn uniformly from its turns
  (`trainer_adapters.tree.run_tree`), continued by the policy.

The environment is `counter` (multi-turn: `read`, `add`, `submit`), served by an in-process gym (the app
over an ASGI transport: the counts do not depend on the transport). The policy is a token sampler over
the tiny tokenizer playing a noisy solver (`NoisySolver`: it reads the conversation, adds towards the
target, wrong 30 % of the time, and sometimes submits early), its choices drawn from each turn's
sampling seed, so episodes run several turns, rewards vary, and siblings differ after their branch
point; the tiny language model's own text would end a counter episode at its first turn. What is
counted per training sample: tokens the policy generated, steps the driver sent, and steps the gym
replayed on the server to rebuild forks (counter forks by replay). `uptime` is recorded before and after.

    python benchmarks/tree_rollouts.py --groups 32 --n 8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from gym_server.app import create_app
from gym_server.core.settings import Settings
from gym_trainer.chat import ChatRenderer
from gym_trainer.client import GymClient
from gym_trainer.driver import DriverConfig, EpisodeSpec, Rollout, RolloutDriver
from gym_trainer.models import build_tiny_tokenizer
from gym_trainer.samplers.base import SamplingParams, TokenSample
from gym_trainer.toolcalls import render_tool_call
from gym_trainer.tree import TreeShape, run_tree, tree_costs

TARGET = re.compile(r"Bring the counter to (-?\d+)")
VALUE = re.compile(r"<tool_response>\n(-?\d+)\n</tool_response>")  # read and add answer the value


class NoisySolver:
    """A counter agent that reads the conversation it is given and mostly does the right thing: it reads
    the value, adds towards the target (by a wrong amount 30 % of the time), and submits when it believes
    the counter is there (20 % of the time a turn early). Its choices come from the turn's sampling seed,
    so siblings differ after their branch point; logprob -1.0 on every token."""

    token_exact = True
    weight_version: str | None = "noisy-solver"

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer, self.eos = tokenizer, int(tokenizer.eos_token_id)

    def describe(self) -> dict[str, Any]:
        return {"kind": "noisy-solver", "model": "noisy-solver", "weight_version": self.weight_version}

    async def aclose(self) -> None:
        return None

    async def sample(
        self, prompt_ids: Sequence[int], params: SamplingParams, stop_token_ids: Sequence[int]
    ) -> TokenSample:
        rng = random.Random(params.seed)
        text = self.tokenizer.decode(list(prompt_ids))
        target = int(TARGET.findall(text)[0])
        values = [int(value) for value in VALUE.findall(text)]
        if not values:
            call = render_tool_call("read", {})
        elif values[-1] == target or (rng.random() < 0.2 and abs(values[-1] - target) <= 3):
            call = render_tool_call("submit", {})
        else:
            amount = max(-10, min(10, target - values[-1]))
            if rng.random() < 0.3:
                amount = rng.randint(-10, 10)
            call = render_tool_call("add", {"amount": amount})
        ids = [*self.tokenizer.encode(call, add_special_tokens=False), self.eos]
        return TokenSample(ids, [-1.0] * len(ids), "stop")


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


async def measure(groups: int, n: int, max_turns: int) -> dict[str, Any]:
    tokenizer = build_tiny_tokenizer()
    renderer, policy = ChatRenderer(tokenizer), NoisySolver(tokenizer)
    with tempfile.TemporaryDirectory() as folder:
        settings = Settings(server_name="tree-bench", store={"url": f"sqlite:///{Path(folder) / 'gym.db'}"})
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with GymClient("http://localhost", transport=transport) as gym:
                results = {}
                for mode in ("flat", "tree"):
                    config = DriverConfig(
                        max_completion_tokens=1 << 16,
                        max_turns=max_turns,
                        sampling=SamplingParams(seed=1_000),
                        run=f"tree-bench-{mode}",
                    )
                    driver = RolloutDriver(gym, policy, renderer, config)
                    started = time.perf_counter()
                    samples: list[Rollout] = []
                    for group in range(groups):
                        # The same sampling seeds in both modes: sample i of group g uses g * 100 + i.
                        task_id, first_seed = f"counter-{group:04d}", group * 100
                        spec = EpisodeSpec("counter", task_id, seed=0, sample_seed=first_seed)
                        if mode == "flat":
                            samples += await driver.run_many(
                                [EpisodeSpec("counter", task_id, None, 0, first_seed + i) for i in range(n)],
                                concurrency=n,
                            )
                        else:
                            samples += await run_tree(driver, gym, spec, n, TreeShape(seed=group))
                    seconds = time.perf_counter() - started
                    costs = tree_costs(samples)
                    failed = sum(sample.failure is not None for sample in samples)
                    results[mode] = {
                        **costs,
                        "failed": failed,
                        "seconds": round(seconds, 2),
                        "per_sample": {
                            key: round(costs[key] / len(samples), 2)
                            for key in ("generated_tokens", "env_steps", "replayed_steps")
                        },
                        "mean_turns": round(sum(s.num_turns for s in samples) / len(samples), 2),
                        "mean_reward": round(
                            sum(s.reward or 0.0 for s in samples) / max(1, len(samples) - failed), 3
                        ),
                    }
                return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--groups", type=int, default=32)
    parser.add_argument("--n", type=int, default=8, help="samples per group")
    parser.add_argument("--max-turns", type=int, default=12)
    args = parser.parse_args()
    before = uptime()
    results = asyncio.run(measure(args.groups, args.n, args.max_turns))
    report = {
        "groups": args.groups,
        "n": args.n,
        "uptime_before": before,
        "uptime_after": uptime(),
        **results,
    }
    print(json.dumps(report, indent=2))
    flat, tree = results["flat"]["per_sample"], results["tree"]["per_sample"]
    print("\n| per training sample | flat | tree | tree / flat |\n|---|---|---|---|")
    for key in ("generated_tokens", "env_steps", "replayed_steps"):
        ratio = f"{tree[key] / flat[key]:.2f}" if flat[key] else "-"
        print(f"| {key} | {flat[key]} | {tree[key]} | {ratio} |")


if __name__ == "__main__":
    main()
