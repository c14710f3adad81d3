"""`gym-server eval` and `gym-server rollout`: play a policy against the gym from the terminal.

Both run the trainer-side `RolloutDriver` in this process against a gym server and a policy server:

- `eval ENV --policy URL`: n episodes per task of a split, with a progress bar; prints the success rate,
  the mean reward with a 95 % confidence interval, per-component means and how episodes ended.
  Episodes are appended to a JSONL file as they finish, so an interrupted evaluation resumes where it
  stopped (same file, same options).
- `rollout ENV --policy URL`: the same episodes as training data: token-exact only (prompt ids,
  completion ids, logprobs, env mask, reward) to JSONL, and stored by the gym under `--run`.

`--api completions` (default) renders through the policy's `/tokenize`, so no tokenizer is needed here;
`--api chat` talks to any OpenAI-compatible chat API (evaluation only: not token-exact).
"""

from __future__ import annotations

import asyncio
import math
import os
import zlib
from pathlib import Path
from typing import Annotated, Any

import httpx
import orjson
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from gym_server.store.records import EVALUATION, PURPOSE_KEY
from gym_trainer.client import GymClient, GymClientError
from gym_trainer.driver import DriverConfig, EpisodeSpec, Rollout, RolloutDriver, summarize
from gym_trainer.remote_chat import RemoteRenderer
from gym_trainer.samplers import CompletionsSampler, OpenAIChatSampler, SamplingParams

__all__ = ["confidence_interval", "evaluate", "rollout"]

console = Console(stderr=True)

GymOption = Annotated[str, typer.Option("--gym", help="gym server URL")]
GymKeyOption = Annotated[
    str | None,
    typer.Option(
        "--gym-key",
        envvar="GYM_API_KEY",
        help="the gym's API key (scope episodes), when it requires one",
        show_default=False,
    ),
]
PolicyOption = Annotated[str, typer.Option("--policy", help="policy server URL (vLLM or `policy serve`)")]
ModelOption = Annotated[str | None, typer.Option(help="served model name (default: the policy's first)")]
SplitOption = Annotated[str, typer.Option(help="dataset split")]
SamplesOption = Annotated[int, typer.Option("-n", "--samples", min=1, help="episodes per task")]
LimitOption = Annotated[int | None, typer.Option(min=1, help="at most this many tasks")]
SeedOption = Annotated[int, typer.Option(help="gym seed of every task's start state")]
MaxTokensOption = Annotated[int, typer.Option(min=1, help="tokens per assistant turn")]
TurnsOption = Annotated[int, typer.Option(min=1, help="assistant turns per episode")]
BudgetOption = Annotated[int, typer.Option(min=1, help="model + environment tokens per episode")]
ConcurrencyOption = Annotated[int, typer.Option(min=1, help="episodes at once")]
RunOption = Annotated[str | None, typer.Option(help="gym run name the trajectories are filed under")]
OutputOption = Annotated[Path | None, typer.Option(help="JSONL file (appended to; resumes)")]


def confidence_interval(values: list[float], z: float = 1.96) -> float:
    """Half-width of the normal-approximation confidence interval of the mean (0 for n < 2)."""
    if len(values) < 2:
        return 0.0
    mean = sum(values) / len(values)
    variance = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return z * math.sqrt(variance / len(values))


def _served_model(policy: str) -> str:
    try:
        data = httpx.get(f"{policy.rstrip('/').removesuffix('/v1')}/v1/models", timeout=10).json()
        return str(data["data"][0]["id"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
        console.print(f"[red]error:[/] cannot list the policy's models at {policy}: {exc}; pass --model")
        raise typer.Exit(2) from exc


def _done_keys(output: Path) -> set[tuple[str, int]]:
    """(task_id, sample index) of episodes already in the file: what a resumed run skips. A last line
    cut by an interruption is removed first, so the next record starts on a line of its own."""
    if not output.exists():
        return set()
    content = output.read_bytes()
    if content and not content.endswith(b"\n"):
        with output.open("r+b") as handle:
            handle.truncate(content.rfind(b"\n") + 1)
    keys = set()
    for line in output.read_bytes().splitlines():
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # a line cut by the interruption: that episode runs again
        keys.add((str(record["task_id"]), int(record["sample"])))
    return keys


def _records(output: Path) -> list[dict[str, Any]]:
    found = []
    for line in output.read_bytes().splitlines():
        try:
            found.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            continue
    return found


async def _play(
    *,
    gym_url: str,
    gym_key: str | None,
    env: str,
    policy: str,
    model: str,
    api: str,
    split: str,
    samples: int,
    limit: int | None,
    seed: int,
    config: DriverConfig,
    concurrency: int,
    output: Path,
    full: bool,
) -> None:
    sampler: Any
    renderer = None
    if api == "chat":
        sampler = OpenAIChatSampler(policy, model, api_key=os.environ.get("OPENAI_API_KEY"))
    else:
        sampler = CompletionsSampler(policy, model)
        renderer = RemoteRenderer(policy, model)
    async with GymClient(gym_url, api_key=gym_key) as gym:
        tasks = await gym.all_tasks(env, split=split)
        tasks = tasks[:limit] if limit is not None else tasks
        done = _done_keys(output)
        todo = [(t["id"], k) for t in tasks for k in range(samples) if (t["id"], k) not in done]
        driver = RolloutDriver(gym, sampler, renderer, config)
        base = config.sampling.seed or 0
        specs = [
            EpisodeSpec(env, task_id, None, seed, base + zlib.crc32(f"{task_id}:{k}".encode()))
            for task_id, k in todo
        ]
        output.parent.mkdir(parents=True, exist_ok=True)
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
        with output.open("ab") as sink, Progress(*columns, console=console) as progress:
            bar = progress.add_task(f"{env} {split}", total=len(tasks) * samples, completed=len(done))

            def record(index: int, episode: Rollout) -> None:
                # Written as each episode ends, so an interrupted run loses none of the finished ones.
                sink.write(orjson.dumps(_record(episode, todo[index][1], full)) + b"\n")
                sink.flush()
                progress.advance(bar)

            await driver.run_many(specs, concurrency, on_episode=record)
    await sampler.aclose()
    if renderer is not None:
        await renderer.aclose()


def _record(episode: Rollout, sample: int, full: bool) -> dict[str, Any]:
    record: dict[str, Any] = {
        "task_id": episode.task_id,
        "sample": sample,
        "session_id": episode.session_id,
        "reward": episode.reward,
        "components": episode.components,
        "failure": episode.failure,
        "stop_reason": episode.stop_reason,
        "num_turns": episode.num_turns,
        "parse_errors": episode.parse_errors,
    }
    if full:
        for name in ("prompt_ids", "completion_ids", "logprobs", "env_mask", "transcript", "tools"):
            record[name] = getattr(episode, name)
    return record


def _report(output: Path, title: str) -> None:
    records = _records(output)
    episodes = [
        Rollout(
            env="",
            task_id=r["task_id"],
            seed=None,
            reward=r["reward"],
            components=r["components"],
            failure=r["failure"],
            stop_reason=r["stop_reason"],
            parse_errors=r["parse_errors"],
        )
        for r in records
    ]
    summary = summarize(episodes)
    scored = [r.reward for r in episodes if r.reward is not None]
    table = Table("metric", "value", title=title)
    table.add_row("episodes", str(summary["episodes"]))
    table.add_row("scored (with signal)", str(summary["scored"]))
    if scored:
        table.add_row("success rate", f"{summary['success_rate']:.3f}")
        table.add_row(
            "mean reward (95% CI)", f"{summary['mean_reward']:.3f} ± {confidence_interval(scored):.3f}"
        )
    for name, mean in summary["components"].items():
        table.add_row(f"  {name}", f"{mean:.3f}")
    table.add_row("endings", ", ".join(f"{k} {v}" for k, v in summary["stop_reasons"].items()))
    table.add_row("failures (no signal)", str(summary["failures"]))
    table.add_row("tool-call parse errors", str(summary["parse_errors"]))
    Console().print(table)
    console.print(f"episodes in {output}")


def _run(
    *,
    env: str,
    gym: str,
    gym_key: str | None,
    policy: str,
    model: str | None,
    api: str,
    split: str,
    samples: int,
    limit: int | None,
    seed: int,
    temperature: float,
    max_tokens: int,
    max_turns: int,
    max_completion_tokens: int,
    concurrency: int,
    run: str | None,
    output: Path,
    training: bool,
) -> None:
    name = model or _served_model(policy)
    config = DriverConfig(
        max_completion_tokens=max_completion_tokens,
        max_turns=max_turns,
        sampling=SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed),
        run=run,
        for_training=training,
        # An evaluation's episodes say so, so `gym-server export` leaves them out of training data.
        metadata={} if training else {PURPOSE_KEY: EVALUATION},
    )
    try:
        asyncio.run(
            _play(
                gym_url=gym,
                gym_key=gym_key,
                env=env,
                policy=policy,
                model=name,
                api=api,
                split=split,
                samples=samples,
                limit=limit,
                seed=seed,
                config=config,
                concurrency=concurrency,
                output=output,
                full=training,
            )
        )
    except GymClientError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from exc
    except KeyboardInterrupt:
        console.print(f"[yellow]interrupted:[/] finished episodes are in {output}; run again to resume")
        raise typer.Exit(130) from None
    _report(output, f"{env} / {split} / {name}")


def evaluate(
    env: Annotated[str, typer.Argument(help="environment to evaluate on")],
    policy: PolicyOption = "http://127.0.0.1:8001",
    gym: GymOption = "http://127.0.0.1:8000",
    gym_key: GymKeyOption = None,
    model: ModelOption = None,
    api: Annotated[str, typer.Option(help="completions (token-in) or chat (any OpenAI API)")] = "completions",
    split: SplitOption = "validation",
    samples: SamplesOption = 1,
    limit: LimitOption = None,
    seed: SeedOption = 0,
    temperature: Annotated[float, typer.Option(min=0.0, help="sampling temperature")] = 0.0,
    max_tokens: MaxTokensOption = 512,
    max_turns: TurnsOption = 8,
    max_completion_tokens: BudgetOption = 4096,
    concurrency: ConcurrencyOption = 16,
    run: RunOption = None,
    output: OutputOption = None,
) -> None:
    """Evaluate a policy on an environment's split: success rate, mean reward ± CI, components."""
    if api not in ("completions", "chat"):
        raise typer.BadParameter("--api must be completions or chat")
    target = output or Path("var/eval") / f"{env.replace('/', '_')}-{split}.jsonl"
    _run(
        env=env,
        gym=gym,
        gym_key=gym_key,
        policy=policy,
        model=model,
        api=api,
        split=split,
        samples=samples,
        limit=limit,
        seed=seed,
        temperature=temperature,
        max_tokens=max_tokens,
        max_turns=max_turns,
        max_completion_tokens=max_completion_tokens,
        concurrency=concurrency,
        run=run or f"eval-{env}-{split}",
        output=target,
        training=False,
    )


def rollout(
    env: Annotated[str, typer.Argument(help="environment to collect episodes from")],
    policy: PolicyOption = "http://127.0.0.1:8001",
    gym: GymOption = "http://127.0.0.1:8000",
    gym_key: GymKeyOption = None,
    model: ModelOption = None,
    split: SplitOption = "train",
    samples: SamplesOption = 8,
    limit: LimitOption = None,
    seed: SeedOption = 0,
    temperature: Annotated[float, typer.Option(min=0.0, help="sampling temperature")] = 1.0,
    max_tokens: MaxTokensOption = 512,
    max_turns: TurnsOption = 8,
    max_completion_tokens: BudgetOption = 4096,
    concurrency: ConcurrencyOption = 16,
    run: RunOption = None,
    output: OutputOption = None,
) -> None:
    """Collect token-exact training episodes (n per task, same seed) to JSONL and the gym's store."""
    target = output or Path("var/rollouts") / f"{env.replace('/', '_')}-{split}.jsonl"
    _run(
        env=env,
        gym=gym,
        gym_key=gym_key,
        policy=policy,
        model=model,
        api="completions",
        split=split,
        samples=samples,
        limit=limit,
        seed=seed,
        temperature=temperature,
        max_tokens=max_tokens,
        max_turns=max_turns,
        max_completion_tokens=max_completion_tokens,
        concurrency=concurrency,
        run=run or f"rollout-{env}-{split}",
        output=target,
        training=True,
    )
