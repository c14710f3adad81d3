"""Held-out evaluation of the demos: the episodes played as an evaluation run, and the interval of their
success over tasks.

`gym-server demo` (tiny and SmolLM2) and `gym-server demo --agent` evaluate before and after training
the same way, so both report the same numbers: a run per phase, every episode marked
`metadata.purpose` "evaluation" (exports leave them out of training data), success per task with a
bootstrap interval over tasks.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from gym_server.store.records import EVALUATION, PURPOSE_KEY

__all__ = ["evaluate_held_out", "task_interval"]


def evaluate_held_out(
    model: Any,
    tokenizer: Any,
    gym_url: str,
    specs: list[Any],
    options: dict[str, Any],
    *,
    phase: str,
    label: str,
    served: str | None = None,
) -> dict[str, Any]:
    """Play the held-out episodes as run `<run>-<phase>` under policy label `label`: before and after
    training are two runs and two policies in the store, which the inspector compares. Every episode is
    stored with `metadata.purpose` "evaluation", so `gym-server export` leaves it out of training data.

    Besides `summarize`'s counts: `per_task` (each task's mean reward) and `task_mean` with its 95 %
    bootstrap interval over tasks (`task_interval`): episodes of one task are not independent draws.

    `model` samples in this process; or pass `served`, the URL of a vLLM server that serves `label` (a
    model or a LoRA adapter of that name), and `model=None`: the episodes sample from it, unseeded
    (`CompletionsSampler.seed_requests`: vLLM's CPU build cannot take seeds under load)."""
    from gym_server.cli.rollouts import confidence_interval
    from gym_trainer.chat import ChatRenderer
    from gym_trainer.client import GymClient
    from gym_trainer.driver import DriverConfig, RolloutDriver, summarize
    from gym_trainer.samplers import CompletionsSampler, LocalSampler, SamplingParams
    from gym_trainer.tracking import rollout_metrics

    async def run() -> dict[str, Any]:
        version = label.rpartition("@")[2] or label
        sampler = (
            CompletionsSampler(served, label, weight_version=version, seed_requests=False)
            if served
            else LocalSampler(
                model,
                int(tokenizer.pad_token_id),
                name=label,
                weight_version=version,
                max_batch=options["batch"],
            )
        )
        config = DriverConfig(
            max_completion_tokens=options["max_completion"],
            max_turns=options["max_turns"],
            sampling=SamplingParams(
                max_tokens=options["max_completion"], temperature=options["eval_temperature"], seed=1234
            ),
            run=f"{options['run']}-{phase}",
            metadata={PURPOSE_KEY: EVALUATION},
        )
        async with GymClient(gym_url) as gym:
            driver = RolloutDriver(gym, sampler, ChatRenderer(tokenizer), config)
            rollouts = await driver.run_many(specs, options["batch"])
        await sampler.aclose()
        summary = summarize(rollouts)
        scored = [r.reward for r in rollouts if r.reward is not None]
        summary["ci95"] = confidence_interval(scored)
        by_task: dict[str, list[float]] = {}
        for rollout in rollouts:  # an episode without a reward (no signal) counts for nothing, as above
            if rollout.reward is not None:
                by_task.setdefault(str(rollout.task_id), []).append(rollout.reward)
        summary["per_task"] = {task: sum(v) / len(v) for task, v in by_task.items()}
        per_task = list(summary["per_task"].values())
        summary["task_mean"] = sum(per_task) / len(per_task) if per_task else None
        summary["task_ci95"] = task_interval(per_task)
        summary["metrics"] = rollout_metrics(rollouts, prefix="eval/")
        summary["run"] = config.run
        summary["policy"] = label
        return summary

    return asyncio.run(run())


def task_interval(per_task: list[float], resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """The 95 % percentile bootstrap interval of the mean over tasks, tasks being what is resampled: the
    held-out set is a sample of tasks, and repeated episodes of one task say little about the next task.
    Seeded, so a run's report is reproducible; (0, 0) without tasks."""
    if not per_task:
        return 0.0, 0.0
    rng = random.Random(seed)
    n = len(per_task)
    means = sorted(sum(rng.choices(per_task, k=n)) / n for _ in range(resamples))
    return means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]
