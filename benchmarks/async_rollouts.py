"""Synchronous against asynchronous GRPO-shaped steps through the gym's rollout buffer: wall time per step
and the share of it each side is busy.

Two sides, each on its own core where the machine has two: **generation** (`gym-server serve` and
`gym-server policy serve` with the tiny model, one torch thread, pinned to core 0) and **training** (this
process, pinned to core 1: `GymRolloutFunc` hands a batch to a real forward, backward and optimizer
step of the same tiny model over the batch's tokens, `--train-passes` times, standing in for GRPO's
loss). Both modes play the same prompts: `--groups` groups of `--group-size` counter episodes a step.

* **sync** (`max_staleness=0`): today's loop; generation and training take turns.
* **async** (`max_staleness=1`): the gym's producer plays step s+1's groups while step s trains.

Busy shares: generation is busy while at least one sample request is in flight (measured around the
sampler), training while its step runs. Weights are not pushed to the policy server (its model is the
same random tiny model throughout): this measures the overlap, not learning. Rounds alternate the modes;
the table reports medians; docs/rollout-buffer.md records the results with the load they ran under.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from rollouts import free_port, wait_ready

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Round:
    mode: str
    step_s: list[float]  # every step's wall time, the first included
    generation_busy_s: float
    training_busy_s: float

    @property
    def wall_s(self) -> float:
        return sum(self.step_s)


def train_step(model: Any, optimizer: Any, batch: dict[str, list[Any]], passes: int) -> None:
    """A forward, backward and optimizer step over the batch's sequences, `passes` times."""
    import torch

    sequences = [p + c for p, c in zip(batch["prompt_ids"], batch["completion_ids"], strict=True)]
    width = max(len(s) for s in sequences)
    ids = torch.tensor([s + [0] * (width - len(s)) for s in sequences])
    mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in sequences])
    for _ in range(passes):
        loss = model(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100)).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def play_round(args: argparse.Namespace, mode: str, gym_url: str, policy_url: str, folder: Path) -> Round:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from gym_trainer.samplers import BusyTimeSampler, CompletionsSampler
    from gym_trainer.trl import GymRolloutFunc, gym_prompt

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    sampler = BusyTimeSampler(CompletionsSampler(policy_url, "tiny", timeout_s=120))
    rollout = GymRolloutFunc(
        gym_url,
        sampler=sampler,
        max_turns=2,
        run=f"bench-{mode}-{time.monotonic_ns()}",
        concurrency=args.groups * args.group_size,
        max_staleness=0 if mode == "sync" else 1,
    )
    config = SimpleNamespace(max_completion_length=args.max_tokens, temperature=1.0, top_p=1.0)
    step_s, training = [], 0.0
    try:
        for step in range(args.steps):
            prompts = [
                gym_prompt("counter", "?", task_id=f"counter-{(step * args.groups + g) % 50:04d}")
                for g in range(args.groups)
                for _ in range(args.group_size)
            ]
            trainer = SimpleNamespace(
                args=config, state=SimpleNamespace(global_step=step), processing_class=tokenizer
            )
            started = time.perf_counter()
            batch = rollout(prompts, trainer)
            trained = time.perf_counter()
            train_step(model, optimizer, batch, args.train_passes)
            training += time.perf_counter() - trained
            step_s.append(time.perf_counter() - started)
    finally:
        rollout.close()
    return Round(mode, step_s, sampler.busy_s, training)


def table(rounds: list[Round]) -> str:
    lines = [
        "| mode | wall s / step (median) | generation busy | training busy |",
        "| --- | --- | --- | --- |",
    ]
    for mode in ("sync", "async"):
        mine = [r for r in rounds if r.mode == mode]
        # the first step of either mode waits for a whole batch: the steady state starts at the second
        per_step = statistics.median(statistics.median(r.step_s[1:]) for r in mine)
        whole = sum(r.wall_s for r in mine)
        generation = sum(r.generation_busy_s for r in mine) / whole
        training = sum(r.training_busy_s for r in mine) / whole
        lines.append(f"| {mode} | {per_step:.3f} | {generation:.0%} | {training:.0%} |")
    return "\n".join(lines)


def pinned(core: int) -> Any:
    """A `preexec_fn` putting the child on `core` (when the machine has it)."""

    def pin() -> None:
        if core < (os.cpu_count() or 1):
            os.sched_setaffinity(0, {core})

    return pin


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--train-passes", type=int, default=8, help="forward/backward passes a step")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each mode, alternating")
    args = parser.parse_args()
    from gym_trainer.models import export_policy

    with tempfile.TemporaryDirectory(prefix="gym-bench-async-") as tmp:
        workdir = Path(tmp)
        folder = export_policy("tiny", workdir / "tiny")
        gym_port, policy_port = free_port(), free_port()
        env = {
            **os.environ,
            "GYM_DATABASE_URL": f"sqlite:///{workdir / 'gym.db'}",
            "GYM_LOG_LEVEL": "warning",
        }
        quiet = {
            "env": env,
            "stdout": subprocess.DEVNULL,
            "stderr": subprocess.DEVNULL,
            "preexec_fn": pinned(0),
        }
        gym = subprocess.Popen(
            [sys.executable, "-m", "gym_server.cli.main", "serve", "--port", str(gym_port)], **quiet
        )
        serve_policy = ["serve", "--model", str(folder), "--served-model-name", "tiny", "--threads", "1"]
        policy_app = "from gym_server.cli.policy import app; app()"
        policy = subprocess.Popen(
            [sys.executable, "-c", policy_app, *serve_policy, "--port", str(policy_port)], **quiet
        )
        try:
            gym_url, policy_url = f"http://127.0.0.1:{gym_port}", f"http://127.0.0.1:{policy_port}"
            wait_ready(f"{gym_url}/readyz", gym)
            wait_ready(f"{policy_url}/v1/models", policy)
            pinned(1)()
            load_before = os.getloadavg()
            rounds = [
                play_round(args, mode, gym_url, policy_url, folder)
                for _ in range(args.rounds)
                for mode in ("sync", "async")
            ]
            load_after = os.getloadavg()
        finally:
            for process in (policy, gym):
                process.terminate()
                process.wait(timeout=30)
    print(table(rounds))
    print(
        f"\n{platform.machine()}, {os.cpu_count()} cores; {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; "
        f"load average {load_before[0]:.2f} at the start, {load_after[0]:.2f} at the end; "
        f"{args.steps} steps of {args.groups} x {args.group_size} episodes, {args.max_tokens} tokens, "
        f"{args.train_passes} training passes, {args.rounds} rounds of each mode"
    )


if __name__ == "__main__":
    main()
