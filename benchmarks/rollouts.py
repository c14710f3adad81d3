"""Rollout benchmark: what the gym costs a trainer, in episodes/s and tokens/s.

The same multi-turn episodes are played twice by the same `RolloutDriver` and the same policy:

* **through the gym**: a `gym-server serve` process (SQLite in a temporary directory), reached over
  HTTP with `GymClient`: session creation, steps with token data, verification, close and the stored
  trajectory;
* **in process**: the environment class instantiated directly in this process (no HTTP, no session
  manager, no store), behind the same driver interface.

The policy is the local policy server (`gym-server policy serve`, transformers on the CPU) with the
tiny model, first warmed up to play counter episodes of two turns (`add(k)`, then `submit`), so each
episode has two samples and two gym steps. Episodes are counter tasks whose target is the start value
plus 3. Runs alternate between the two modes; the table reports the median of `--repeats` runs. The
gym's overhead is (in-process episodes/s / gym episodes/s - 1). Run `--quick` for a smoke run,
`--write-docs` to update docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
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
from typing import Any

import httpx

from gym_server.cli.local_gym import local_gym

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Measure:
    mode: str
    seconds: float
    episodes: int
    model_tokens: int
    env_tokens: int
    turns: int
    mean_reward: float | None

    @property
    def episodes_per_s(self) -> float:
        return self.episodes / self.seconds

    @property
    def tokens_per_s(self) -> float:
        return (self.model_tokens + self.env_tokens) / self.seconds


class DirectBackend:
    """The driver's gym interface over environment instances in this process: the baseline."""

    def __init__(self) -> None:
        from gym_server.sdk.registry import Registry

        self.registry = Registry.discover()
        self.live: dict[str, Any] = {}

    async def create_session(self, env: str, **kwargs: Any) -> Any:
        from gym_server.sdk.tasks import Task
        from gym_trainer.client import SessionInfo

        entry = self.registry.get(env)
        task = Task.model_validate(kwargs["task"]) if kwargs.get("task") else entry.task(kwargs["task_id"])
        instance = entry.cls(task, kwargs.get("seed"))
        await instance.reset()
        session_id = f"direct-{len(self.live)}-{time.monotonic_ns()}"
        self.live[session_id] = instance
        return SessionInfo(
            session_id,
            env,
            entry.version,
            task.id,
            kwargs.get("seed"),
            list(instance.messages),
            instance.tools(),
            entry.cls.max_turns or 64,
            "",
            "",
        )

    async def step(self, session_id: str, message: dict[str, Any], turn_data: Any = None) -> Any:
        from gym_trainer.client import StepResult

        instance = self.live[session_id]
        outcome = await instance.step(message, tool_timeout_s=30.0, max_tool_calls=32)
        return StepResult(outcome.messages, instance.done, None, outcome.info)

    async def verify(self, session_id: str) -> Any:
        from gym_trainer.client import VerifyResult

        result = await self.live[session_id].verify()
        return VerifyResult(result.reward, dict(result.components), dict(result.info), result.failure)

    async def close(self, session_id: str, *, failure: str | None = None) -> None:
        instance = self.live.pop(session_id, None)
        if instance is not None:
            await instance.close()


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(url: str, process: subprocess.Popen[bytes], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url} exited with {process.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not become ready")


async def play(
    mode: str, backend: Any, driver_args: dict[str, Any], specs: list[Any], concurrency: int
) -> Measure:
    from gym_trainer.driver import RolloutDriver, summarize

    driver = RolloutDriver(backend, **driver_args)
    started = time.perf_counter()
    rollouts = await driver.run_many(specs, concurrency)
    seconds = time.perf_counter() - started
    failures = [r for r in rollouts if r.failure]
    if failures:
        raise RuntimeError(f"{mode}: {len(failures)} episodes failed, e.g. {failures[0].error}")
    summary = summarize(rollouts)
    return Measure(
        mode=mode,
        seconds=seconds,
        episodes=len(rollouts),
        model_tokens=sum(r.env_mask.count(1) for r in rollouts),
        env_tokens=sum(r.env_mask.count(0) for r in rollouts),
        turns=sum(r.num_turns for r in rollouts),
        mean_reward=summary["mean_reward"],
    )


def prepare_policy(workdir: Path, warmup_steps: int, gym_url: str) -> tuple[Path, list[dict[str, Any]]]:
    """Warm the tiny model up on counter tool calls and save it for the policy server."""
    import torch

    from gym_trainer.client import SyncGymClient
    from gym_trainer.models import build_tiny_model, build_tiny_tokenizer
    from gym_trainer.warmup import counter_offset_tasks, warm_up_counter

    torch.set_num_threads(1)
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer, seed=0)
    with SyncGymClient(gym_url) as gym:
        tasks = counter_offset_tasks(gym, 16)
    warm_up_counter(model, tokenizer, tasks, steps=warmup_steps)
    folder = workdir / "tiny-counter"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, tasks


async def benchmark(
    args: argparse.Namespace, gym_url: str, policy_url: str, tasks: list[dict[str, Any]], tokenizer: Any
) -> list[Measure]:
    from gym_trainer.chat import ChatRenderer
    from gym_trainer.client import GymClient
    from gym_trainer.driver import DriverConfig, EpisodeSpec
    from gym_trainer.samplers import CompletionsSampler, SamplingParams

    sampler = CompletionsSampler(policy_url, "tiny-counter")
    config = DriverConfig(
        max_completion_tokens=128, max_turns=3, sampling=SamplingParams(max_tokens=32, seed=0), run="bench"
    )
    driver_args = {"sampler": sampler, "renderer": ChatRenderer(tokenizer), "config": config}
    specs = [
        EpisodeSpec("counter", None, tasks[i % len(tasks)]["task"], tasks[i % len(tasks)]["seed"], i)
        for i in range(args.episodes)
    ]
    measures: list[Measure] = []
    async with GymClient(gym_url, max_connections=args.concurrency) as gym:
        await play("warm-up", gym, driver_args, specs[: args.concurrency], args.concurrency)
        for _ in range(args.repeats):
            measures.append(await play("gym", gym, driver_args, specs, args.concurrency))
            measures.append(await play("in process", DirectBackend(), driver_args, specs, args.concurrency))
    await sampler.aclose()
    return measures


def table(measures: list[Measure]) -> tuple[str, float]:
    rows, medians = [], {}
    for mode in ("gym", "in process"):
        runs = [m for m in measures if m.mode == mode]
        eps = statistics.median(m.episodes_per_s for m in runs)
        tps = statistics.median(m.tokens_per_s for m in runs)
        mts = statistics.median(m.model_tokens / m.seconds for m in runs)
        medians[mode] = eps
        first = runs[0]
        rows.append(
            f"| {mode} | {first.episodes} | {first.turns / first.episodes:.2f} | "
            f"{(first.model_tokens + first.env_tokens) / first.episodes:.1f} | {eps:.2f} | {tps:,.0f} | "
            f"{mts:,.0f} | {first.mean_reward:.2f} |"
        )
    overhead = (medians["in process"] / medians["gym"] - 1) * 100
    header = (
        "| mode | episodes | turns/episode | tokens/episode | episodes/s | tokens/s | sampled tokens/s | "
        "mean reward |\n|---|---:|---:|---:|---:|---:|---:|---:|"
    )
    return header + "\n" + "\n".join(rows), overhead


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=128)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup-steps", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 16 episodes, one repeat")
    parser.add_argument("--write-docs", action="store_true", help="replace the section in docs/benchmarks.md")
    args = parser.parse_args()
    if args.quick:
        args.episodes, args.repeats, args.warmup_steps = 16, 1, 30
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from gym_trainer.chat import ChatRenderer  # noqa: F401  (fail early without the extra)

    with (
        tempfile.TemporaryDirectory(prefix="gym-bench-rollouts-") as tmp,
        local_gym(None, Path(tmp) / "gym.db") as gym_url,
    ):
        workdir = Path(tmp)
        policy_port = free_port()
        env = {**os.environ, "GYM_LOG_LEVEL": "warning"}
        policy: subprocess.Popen[bytes] | None = None
        try:
            folder, tasks = prepare_policy(workdir, args.warmup_steps, gym_url)
            policy = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "from gym_server.cli.policy import app; app()",
                    "serve",
                    "--model",
                    str(folder),
                    "--served-model-name",
                    "tiny-counter",
                    "--port",
                    str(policy_port),
                    "--threads",
                    "1",
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            policy_url = f"http://127.0.0.1:{policy_port}"
            wait_ready(f"{policy_url}/v1/models", policy)
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(folder)
            load_before = os.getloadavg()
            measures = asyncio.run(benchmark(args, gym_url, policy_url, tasks, tokenizer))
            load_after = os.getloadavg()
        finally:
            if policy is not None and policy.poll() is None:
                policy.terminate()
                policy.wait(timeout=30)
    rendered, overhead = table(measures)
    machine = (
        f"{platform.machine()}, {os.cpu_count()} cores; Python {platform.python_version()}; "
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; load average {load_before[0]:.2f} at the start, "
        f"{load_after[0]:.2f} at the end"
    )
    text = (
        f"{rendered}\n\nGym overhead: **{overhead:.1f} %** (in-process episodes/s over gym episodes/s, "
        f"medians of {args.repeats} runs of {args.episodes} episodes, {args.concurrency} at once).\n\n"
        f"**Machine.** {machine}."
    )
    print(text)
    if args.write_docs:
        write_docs(text)


def write_docs(text: str) -> None:
    path = ROOT / "docs" / "benchmarks.md"
    marker = "## Rollouts"
    section = (
        f"{marker}\n\n`benchmarks/rollouts.py` plays the same two-turn counter episodes with the same driver "
        "and the same policy (the tiny model behind `gym-server policy serve`, warmed up to write tool "
        "calls) through the gym server and with the environment in process, and reports what the gym adds. "
        "Reproduce with "
        "`python benchmarks/rollouts.py --write-docs`.\n\n" + text + "\n"
    )
    content = path.read_text() if path.exists() else "# Benchmarks\n"
    if marker in content:
        head, _, rest = content.partition(marker)
        tail = rest.split("\n## ", 1)
        content = head + section + ("\n## " + tail[1] if len(tail) > 1 else "")
    else:
        content = content.rstrip("\n") + "\n\n" + section
    path.write_text(content)


if __name__ == "__main__":
    main()
