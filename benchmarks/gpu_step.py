"""GPU step speed: where a GRPO step of the SmolLM2 chain_sum recipe spends its time, and how busy the GPU is.

It trains `gym-server demo --model smollm2`'s recipe (the same `GRPOConfig` and LoRA adapter, built by
`gym_trainer.trl.grpo_args` / `lora_config`; SmolLM2-135M, `reasoning_gym/chain_sum`, 8 generations
x 2 prompts, 64 completion tokens, `extracted` shaping) against a fresh local gym, with the bundled
in-process sampler on the same device, and splits every step into three phases:

* **rollout**: the `rollout_func` (episodes played through the gym: sampling on the device + gym HTTP);
* **scoring**: the rest of TRL's `_generate_and_score_completions` (rewards, logprobs, advantages);
* **update**: the rest of the step (forward, backward and the optimiser step).

On a GPU it samples utilisation every 0.1 s (`torch.cuda.utilization`, which needs nvidia-ml-py, else
`nvidia-smi`) and tags each sample with the phase running then; the driver's counter is itself an average
over its own sampling window, so short phases are blurred. Peak memory is torch's `max_memory_allocated`.
The first step (CUDA and allocator warm-up) is shown but left out of the means. Target (issue 25): at most
2 s a step on one H100/H200.

Without a GPU it runs a tiny configuration (the 0.1 M test model, 4 generations x 1 prompt, 16 tokens,
2 steps) and says so: those numbers only show that the script works, not the recipe's speed.

    python benchmarks/gpu_step.py                      # the recipe on the GPU (auto), or the tiny CPU run
    python benchmarks/gpu_step.py --steps 10 --json var/gpu_step.json
    python benchmarks/gpu_step.py --device cpu --model smollm2 --steps 2   # the recipe on the CPU (slow)

`--policy local,vllm` measures the same recipe twice in one run, side by side: sampling in the trainer's
process (the bundled sampler, `local`), then from a real vLLM (`make vllm`; `$GYM_VLLM_PYTHON`) whose LoRA
adapter `VLLMWeightSync` loads after every step; a fourth phase, **weights**, is that hand-over (save the
adapter, `POST /v1/load_lora_adapter` in place), and the rollout phase is then vLLM's generation.

    python benchmarks/gpu_step.py --device cpu --model smollm2 --policy local,vllm --steps 4
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PHASES = ("rollout", "scoring", "weights", "update")


class PhaseClock:
    """Per-step phase times. Phases nest (update ⊃ generate-and-score ⊃ rollout); `current` is the
    innermost running one, read by the utilisation sampler."""

    def __init__(self, synchronize: Callable[[], None]) -> None:
        self.synchronize = synchronize
        self.current = "idle"
        self.steps: list[dict[str, float]] = []
        self._spent: dict[str, float] = defaultdict(float)
        self._step_started = 0.0

    def begin_step(self) -> None:
        self.synchronize()
        self._spent.clear()
        self.current = "update"
        self._step_started = time.perf_counter()

    def end_step(self) -> None:
        self.synchronize()
        total = time.perf_counter() - self._step_started
        generate = self._spent["generate"]
        rollout = self._spent["rollout"]
        weights = self._spent["weights"]
        self.steps.append(
            {
                "rollout": rollout,
                "scoring": generate - rollout,
                "weights": weights,
                "update": total - generate - weights,
                "total": total,
            }
        )
        self.current = "idle"

    def timed(self, key: str, phase: str, call: Callable[..., Any]) -> Callable[..., Any]:
        """`call`, its wall time added to `key` and `phase` marked as running while it runs."""

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.synchronize()
            outer, self.current = self.current, phase
            started = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                self.synchronize()
                self._spent[key] += time.perf_counter() - started
                self.current = outer

        return wrapper


class UtilisationSampler(threading.Thread):
    """GPU utilisation (%) every `period` s, each sample tagged with the phase running then."""

    def __init__(self, clock: PhaseClock, index: int, period: float = 0.1) -> None:
        super().__init__(name="gpu-utilisation", daemon=True)
        self.clock, self.index, self.period = clock, index, period
        self.samples: dict[str, list[float]] = defaultdict(list)
        self.source = "none"
        self._stop = threading.Event()

    def read(self) -> float | None:
        import torch

        try:
            value = float(torch.cuda.utilization(self.index))
            self.source = "torch.cuda.utilization (NVML)"
            return value
        except Exception:  # no nvidia-ml-py: fall back on the driver's command line tool
            pass
        if shutil.which("nvidia-smi") is None:
            return None
        query = [
            "nvidia-smi",
            "-i",
            str(self.index),
            "--query-gpu=utilization.gpu",
            "--format=csv,noheader,nounits",
        ]
        done = subprocess.run(query, capture_output=True, text=True, timeout=5, check=False)
        if done.returncode != 0:
            return None
        self.source = "nvidia-smi"
        return float(done.stdout.strip().splitlines()[0])

    def run(self) -> None:
        while not self._stop.wait(self.period):
            phase = self.clock.current
            value = self.read()
            if value is None:
                return
            if phase != "idle":
                self.samples[phase].append(value)

    def stop(self) -> None:
        self._stop.set()
        self.join(timeout=10)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda or cuda:N")
    parser.add_argument(
        "--dtype", default="auto", help="auto (bf16 on a GPU that has it, else fp32), fp32, bf16"
    )
    parser.add_argument(
        "--model", default=None, help="smollm2 (the recipe; GPU default) or tiny (CPU default)"
    )
    parser.add_argument("--env", default="reasoning_gym/chain_sum")
    parser.add_argument(
        "--steps", type=int, default=None, help="GRPO steps (default: 6 on a GPU, 2 on the CPU)"
    )
    parser.add_argument("--generations", type=int, default=None, help="group size (default 8; CPU tiny: 4)")
    parser.add_argument("--prompts-per-step", type=int, default=None, help="default 2; CPU tiny: 1")
    parser.add_argument("--max-completion", type=int, default=None, help="default 64; CPU tiny: 16")
    parser.add_argument("--gym", default=None, help="use this gym instead of starting one")
    parser.add_argument(
        "--policy", default="local", help="local, vllm, or both side by side: local,vllm (module docstring)"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the record here")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

    from gym_trainer.devices import resolve_or_exit

    placement = resolve_or_exit(args.device, args.dtype)
    gpu = placement.is_cuda
    tiny_run = not gpu and args.model in (None, "tiny")
    model_name = args.model or ("smollm2" if gpu else "tiny")
    steps = args.steps or (6 if gpu else 2)
    generations = args.generations or (4 if tiny_run else 8)
    prompts = args.prompts_per_step or (1 if tiny_run else 2)
    max_completion = args.max_completion or (16 if tiny_run else 64)
    if tiny_run:
        print(
            "NOTE: no GPU in use: a tiny CPU configuration (the 0.1 M test model, "
            f"{generations} generations x {prompts} prompt, {max_completion} tokens, {steps} steps). "
            "These times show the script works; they are not the SmolLM2 recipe's GPU speed."
        )
    print(f"device: {placement.describe()}; model {model_name} on {args.env}")

    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    if not set(policies) <= {"local", "vllm"}:
        raise SystemExit("--policy takes local, vllm or local,vllm")
    print(f"load average at the start: {os.getloadavg()[0]:.2f}")
    from gym_server.cli.local_gym import local_gym

    with (
        tempfile.TemporaryDirectory(prefix="gpu-step-") as tmp,
        local_gym(args.gym, Path(tmp) / "gym.db") as url,
    ):
        for policy in policies:
            recipe = Recipe(model_name, args.env, steps, generations, prompts, max_completion)
            steps_seen, monitor, wall = measure(policy, recipe, placement, url, Path(tmp) / policy)
            report(
                steps_seen,
                monitor,
                placement.describe(),
                tiny_run,
                wall,
                args.json,
                model_name,
                args.env,
                policy,
            )


@dataclass(frozen=True)
class Recipe:
    model: str
    env: str
    steps: int
    generations: int
    prompts: int
    max_completion: int


def measure(
    policy_kind: str, recipe: Recipe, placement: Any, url: str, tmp: Path
) -> tuple[list[dict[str, float]], UtilisationSampler | None, float]:
    """Train `recipe.steps` GRPO steps with sampling `policy_kind` (local or vllm); the phase times."""
    import torch

    trl: Any = importlib.import_module("trl")
    from transformers import TrainerCallback

    from gym_trainer.models import export_policy, load_policy
    from gym_trainer.samplers import CompletionsSampler
    from gym_trainer.trl import (
        GymRolloutFunc,
        grpo_args,
        gym_component_reward,
        gym_reward,
        load_gym_dataset,
        lora_config,
    )

    gpu = placement.is_cuda
    synchronize = torch.cuda.synchronize if gpu else (lambda: None)
    clock = PhaseClock(synchronize)

    class StepCallback(TrainerCallback):
        def on_step_begin(self, *_: Any, **__: Any) -> None:
            clock.begin_step()

        def on_step_end(self, *_: Any, **__: Any) -> None:
            clock.end_step()

    with contextlib.ExitStack() as stack:
        callbacks: list[Any] = []
        sampler = None
        lora = recipe.model == "smollm2" or policy_kind == "vllm"  # vLLM takes the weights as an adapter
        if policy_kind == "vllm":
            from gym_trainer.trl.weight_sync import VLLMWeightSync
            from gym_trainer.vllm import LoraSync, VLLMOptions, VLLMServer, find_vllm_python

            folder = export_policy(recipe.model, tmp / "model")
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = int(sock.getsockname()[1])
            options = VLLMOptions(folder, recipe.model, port=port)
            server = VLLMServer(options, find_vllm_python(), tmp / "vllm.log")
            stack.enter_context(server.running())
            sync = VLLMWeightSync(LoraSync(server.url, "bench-lora", tmp / "adapters"))
            sync._push = clock.timed("weights", "weights", sync._push)  # type: ignore[method-assign]
            callbacks.append(sync)
            sampler = CompletionsSampler(server.url, "bench-lora", seed_requests=False)
            policy, tokenizer = load_policy(str(folder), placement=placement)
        else:
            policy, tokenizer = load_policy(recipe.model, placement=placement)
        callbacks.append(StepCallback())  # after the weight hand-over: its time is inside the step
        dataset = load_gym_dataset(url, recipe.env, split="train", limit=64, seed=0)
        rollout = GymRolloutFunc(
            url, sampler=sampler, max_turns=4, run=f"gpu-step-{int(time.time())}", seed=0
        )
        config = grpo_args(
            tmp / "trainer",
            placement,
            reward_weights=[1.0, 0.5],
            generations=recipe.generations,
            prompts_per_step=recipe.prompts,
            max_completion=recipe.max_completion,
            lr=5e-4 if recipe.model == "smollm2" else 1e-3,
            steps=recipe.steps,
            seed=0,
        )
        config.disable_tqdm = True
        trainer = trl.GRPOTrainer(
            model=policy,
            reward_funcs=[gym_reward, gym_component_reward("extracted")],
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            rollout_func=clock.timed("rollout", "rollout", rollout),
            peft_config=lora_config() if lora else None,
            callbacks=callbacks,
        )
        generate = trainer._generate_and_score_completions
        trainer._generate_and_score_completions = clock.timed("generate", "scoring", generate)
        monitor = UtilisationSampler(clock, placement.device.index or 0) if gpu else None
        if gpu:
            torch.cuda.reset_peak_memory_stats()
        if monitor is not None:
            monitor.start()
        started = time.perf_counter()
        try:
            trainer.train()
        finally:
            if monitor is not None:
                monitor.stop()
            rollout.close()
        return clock.steps, monitor, time.perf_counter() - started


def report(
    steps: list[dict[str, float]],
    monitor: UtilisationSampler | None,
    device: str,
    tiny_run: bool,
    wall: float,
    json_path: Path | None,
    model: str,
    env: str,
    policy: str = "local",
) -> None:
    print(f"\npolicy: {policy} (load average {os.getloadavg()[0]:.2f})")
    print(
        f"{'step':>4} {'rollout s':>10} {'scoring s':>10} {'weights s':>10} {'update s':>10} {'total s':>9}"
    )
    for number, step in enumerate(steps, 1):
        print(f"{number:>4} " + " ".join(f"{step[key]:>10.2f}" for key in PHASES) + f" {step['total']:>9.2f}")
    measured = steps[1:] if len(steps) > 1 else steps
    means = {key: statistics.fmean(s[key] for s in measured) for key in (*PHASES, "total")}
    print(
        f"mean of steps {'2..' if len(steps) > 1 else '1..'}{len(steps)}: "
        + ", ".join(f"{key} {means[key]:.2f} s" for key in (*PHASES, "total"))
        + f" (wall {wall:.1f} s)"
    )
    record: dict[str, Any] = {
        "policy": policy,
        "load_average": os.getloadavg(),
        "device": device,
        "model": model,
        "env": env,
        "tiny_cpu_configuration": tiny_run,
        "steps": steps,
        "mean_excluding_first": means,
    }
    if monitor is not None:
        import torch

        utilisation = {phase: statistics.fmean(v) for phase, v in monitor.samples.items() if v}
        every = [v for values in monitor.samples.values() for v in values]
        record["gpu_utilisation_percent"] = {**utilisation, "all": statistics.fmean(every) if every else None}
        record["utilisation_source"] = monitor.source
        record["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
        shown = ", ".join(f"{phase} {utilisation[phase]:.0f} %" for phase in PHASES if phase in utilisation)
        print(f"GPU utilisation ({monitor.source}): {shown or 'no samples'}")
        print(f"peak GPU memory: {record['peak_memory_gib']:.2f} GiB")
    else:
        print("GPU utilisation: n/a (no GPU in use)")
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path = json_path.with_name(f"{json_path.stem}-{policy}{json_path.suffix}")
        json_path.write_text(json.dumps(record, indent=2))
        print(f"record: {json_path}")


if __name__ == "__main__":
    main()
