"""`gym-server demo --agent`: a model learns a multi-turn tool environment through the gym, start to finish.

The pipeline is the one the project recommends for agents (SFT warm start, then GRPO with verifiable
rewards, then evaluation), and every stage goes through the gym's own parts:

1. **Demonstrations**: the environment's `reference_solution()` of each training task (`phonebook`:
   `lookup`, then `dial` the extension it returned) is played through a served gym as a session of policy
   `reference`, run `<run>-demos`, verified and stored like any episode.
2. **Export**: `export_training_set(..., "sft")` (what `gym-server export --kind sft` writes) turns the
   stored demonstrations into TRL's conversational SFT set, `sft.jsonl`.
3. **SFT warm start**: TRL's `SFTTrainer` on that file (a LoRA adapter for SmolLM2, merged afterwards;
   the whole tiny model).
4. **Curriculum**: the warm-started policy plays a probe of training tasks (run `<run>-probe`); the gym's
   curriculum (`difficulty` rule over that run's pass rates, docs/curriculum.md) weights the GRPO tasks.
5. **GRPO** through the token-exact `GymRolloutFunc` (a fresh LoRA adapter on the merged SFT model), once
   with the curriculum's tasks and, with `--compare-uniform` (default), once more from the same warm start
   with tasks drawn uniformly, so the two sampling rules are measured against each other. With
   `--max-staleness k` the rollouts of the next steps are played while a step trains (the gym's rollout
   buffer), and `--compare-sync` adds each run's synchronous twin, for learning curves side by side.
6. **Held-out evaluation** on the validation split (people no training task names) before anything,
   after SFT and after each GRPO run: runs `<run>-base`, `-sft`, `-eval-grpo-curriculum`,
   `-eval-grpo-uniform`, each under its own policy label, with Wilson 95 % intervals on the success rate.

It leaves under `--output` (default `var/demo-agent/`): `demo.json`, `reward_curve.png`, `sft.jsonl` and
the gym's store `gym.db` (the inspector compares the runs: docs/agent-demo.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import importlib
import json
import math
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.table import Table

from gym_server.cli.heldout import evaluate_held_out
from gym_server.cli.local_gym import local_gym
from gym_trainer.trl import grpo_args, lora_config

if TYPE_CHECKING:
    from gym_trainer.devices import Placement

__all__ = ["AgentPlan", "play_reference_demonstrations", "run_agent_demo", "wilson_interval"]

console = Console(stderr=True)

AGENT_ENV = "phonebook"
REFERENCE_POLICY = "reference"


@dataclass(frozen=True)
class AgentPlan:
    """The sizes of each stage (the defaults are the README's 2-core run, docs/agent-demo.md)."""

    demos: int = 200
    sft_steps: int = 12
    sft_batch: int = 4
    sft_lr: float = 1e-3
    probe_tasks: int = 8
    grpo_steps: int = 30
    generations: int = 4
    prompts_per_step: int = 2
    # 1e-3 collapsed both GRPO runs of one warm start (one step with a signal, then all-zero groups while
    # Adam's moments kept moving the adapter); 5e-4 learned in both (docs/rollout-buffer.md, measured)
    grpo_lr: float = 5e-4
    eval_tasks: int = 50
    # model and tool tokens of a whole episode: a right one is about 90 with SmolLM2's tokenizer (two calls
    # of about 32 tokens, the tool's reply about 20); 80 cut every one of them after the lookup
    max_completion: int = 128
    eval_temperature: float = 1.0
    compare_uniform: bool = True
    # 0: each GRPO step waits for its rollouts; k >= 1: vLLM plays the next steps' groups while this one
    # trains, at most k adapter versions behind (the gym's rollout buffer, docs/rollout-buffer.md)
    max_staleness: int = 0
    # with max_staleness > 0: each GRPO run also once synchronously, from the same warm start
    compare_sync: bool = False
    # an earlier run's sft-model/ folder: its GRPO runs and evaluations only (no base, demonstrations, SFT)
    warm_start: str | None = None
    # vllm: a real vLLM samples every rollout and evaluation, the trainer's adapter loaded into it after
    # every optimizer step (docs/vllm.md); local: the trainer's own model samples in this process
    policy: str = "vllm"
    vllm_python: str | None = None


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a success rate: unlike the normal one, it stays inside [0, 1] and is
    not empty at 0 or n successes, where a demo's before and after often sit."""
    if n == 0:
        return 0.0, 1.0
    rate = successes / n
    centre = (rate + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def play_reference_demonstrations(gym_url: str, env: str, count: int, run: str, seed: int) -> int:
    """Play the reference solution of the first `count` training tasks through the gym (policy
    `reference`, run `run`), so they are stored, verified episodes like any other; returns how many
    scored 1. The solution is built from a local instance of the environment with the same task and
    seed, which holds the same hidden state as the served one (environments are deterministic)."""
    from gym_server.sdk.registry import Registry
    from gym_trainer.client import SyncGymClient

    entry = Registry.discover().get(env)
    solved = 0
    with SyncGymClient(gym_url) as gym:
        for task in entry.dataset.tasks("train")[:count]:  # with their answers, which the API hides
            local = entry.cls(task, seed)
            asyncio.run(local.reset())
            solution = local.reference_solution() or []
            session = gym.create_session(
                env, task_id=task.id, seed=seed, run=run, policy={"model": REFERENCE_POLICY}
            )
            for message in solution:
                if gym.step(session.session_id, message).done:
                    break
            solved += int(gym.verify(session.session_id).reward >= 1.0)
            gym.close(session.session_id)
    return solved


def _sft(
    policy: Any,
    tokenizer: Any,
    data: Path,
    output: Path,
    placement: Placement,
    plan: AgentPlan,
    *,
    lora: bool,
) -> Any:
    """The SFT warm start on the exported demonstrations; returns a plain model (a LoRA adapter is merged
    into SmolLM2's weights, so GRPO's own adapter starts from the warm start)."""
    datasets: Any = importlib.import_module("datasets")
    trl: Any = importlib.import_module("trl")
    dataset = datasets.load_dataset("json", data_files=str(data), split="train")
    args = trl.SFTConfig(
        output_dir=str(output),
        use_cpu=not placement.is_cuda,
        bf16=placement.bf16,
        per_device_train_batch_size=plan.sft_batch,
        max_steps=plan.sft_steps,
        learning_rate=plan.sft_lr,
        max_length=1024,
        logging_steps=5,
        report_to="none",
        save_strategy="no",
        seed=0,
    )
    trainer = trl.SFTTrainer(
        model=policy,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora_config() if lora else None,
    )
    trainer.train()
    trained = trainer.model
    return trained.merge_and_unload() if lora else trained


def _grpo(
    policy: Any,
    tokenizer: Any,
    dataset: Any,
    gym_url: str,
    run: str,
    output: Path,
    placement: Placement,
    plan: AgentPlan,
    seed: int,
    *,
    lora: bool,
    served: _Served | None,
    adapter: str,
    max_staleness: int,
) -> tuple[Any, list[float | None], dict[str, Any]]:
    """GRPO through the gym's token-exact rollout path; returns the trained model, its per-step training
    reward and where the time went: per step, `generation` (how long the step waited for its rollouts),
    `weight_update` and `step` (TRL's step time, the wait included); for the run, `wall`,
    `generation_busy` (how long vLLM had a request of this run in flight) and `training_busy` (the steps'
    time less their waits).

    With `served`, rollouts sample from vLLM under the adapter's name, and `VLLMWeightSync` loads the
    trainer's adapter into it before the first step and after every step; with `max_staleness` > 0 they
    are played while the previous step trains, through the gym's rollout buffer."""
    trl: Any = importlib.import_module("trl")
    from gym_trainer.trl import GymRolloutFunc, gym_reward

    sampler, callbacks, sync = None, [], None
    if served is not None:
        from gym_trainer.samplers import BusyTimeSampler, CompletionsSampler
        from gym_trainer.trl.weight_sync import VLLMWeightSync
        from gym_trainer.vllm import LoraSync

        sync = LoraSync(served.url, adapter, output / "adapters")
        sampler = BusyTimeSampler(CompletionsSampler(served.url, adapter, seed_requests=False))
        callbacks.append(VLLMWeightSync(sync))
    rollout = GymRolloutFunc(
        gym_url, sampler=sampler, max_turns=4, run=run, seed=seed, max_staleness=max_staleness
    )
    generation: list[float] = []

    def timed(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        started = time.perf_counter()
        try:
            return rollout(prompts, trainer)
        finally:
            generation.append(time.perf_counter() - started)

    args = grpo_args(
        output,
        placement,
        reward_weights=[1.0],
        generations=plan.generations,
        prompts_per_step=plan.prompts_per_step,
        max_completion=plan.max_completion,
        lr=plan.grpo_lr,
        steps=plan.grpo_steps,
        seed=seed,
    )
    trainer = trl.GRPOTrainer(
        model=policy,
        reward_funcs=[gym_reward],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=timed,
        peft_config=lora_config() if lora else None,
        callbacks=callbacks,
    )
    started = time.perf_counter()
    try:
        trainer.train()
    finally:
        rollout.close()
    wall = time.perf_counter() - started
    steps = [float(log["step_time"]) for log in trainer.state.log_history if "step_time" in log]
    timings = {
        "generation": [round(t, 3) for t in generation],
        "weight_update": [round(t.total_s, 3) for t in sync.timings[1:]] if sync else [],
        "step": [round(t, 3) for t in steps],
        "wall": round(wall, 1),
        "generation_busy": round(sampler.busy_s, 1) if sampler is not None else None,
        "training_busy": round(sum(steps) - sum(generation), 1),
    }
    return trainer.model, [h["mean_reward"] for h in rollout.history], timings


# Written beside a warm start's weights: which `--model` made it, so `--warm-start` refuses another.
WARM_START_RECORD = "gym-demo.json"


def _warm_start_model(folder: Path) -> str | None:
    """The `--model` an earlier run's sft-model/ was made with; None for a folder without the record."""
    try:
        return str(json.loads((folder / WARM_START_RECORD).read_text())["model"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _grpo_runs(
    samplings: dict[str, dict[str, Any] | None], plan: AgentPlan
) -> list[tuple[str, dict[str, Any] | None, int]]:
    """Each GRPO run's name, task choice and staleness bound: one run per sampling rule at
    `plan.max_staleness` (named `<rule>-async<k>` when asynchronous), and with `compare_sync` its
    synchronous twin first, so both start from the same warm start."""
    runs = []
    for rule, choice in samplings.items():
        if plan.max_staleness and plan.compare_sync:
            runs.append((rule, choice, 0))
        name = f"{rule}-async{plan.max_staleness}" if plan.max_staleness else rule
        runs.append((name, choice, plan.max_staleness))
    return runs


@dataclass
class _Served:
    """The demo's vLLM: one server at a time (the base model, then the SFT warm start with LoRA on), each
    started for a `save_pretrained` folder and stopped before the next (docs/vllm.md)."""

    python: Path
    logs: Path
    url: str = ""
    _server: Any = None

    @contextlib.contextmanager
    def serving(self, folder: Path, name: str, *, lora: bool) -> Iterator[_Served]:
        from gym_trainer.vllm import VLLMOptions, VLLMServer

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        options = VLLMOptions(model_dir=folder, served_name=name, port=port, lora=lora, max_loras=2)
        server = VLLMServer(options, self.python, self.logs / f"vllm-{name.replace('@', '-')}.log")
        console.print(f"starting vLLM for {name} ({folder})…")
        with server.running():
            self.url = server.url
            yield self
        self.url = ""


def _vllm_python(plan: AgentPlan) -> Path:
    """vLLM's python, or a clear exit before anything slow starts."""
    from gym_trainer.vllm import VLLMMissing, find_vllm_python

    try:
        return find_vllm_python(plan.vllm_python)
    except VLLMMissing as exc:
        console.print(f"[red]error:[/] gym-server demo --agent --policy vllm: {exc} (or --policy local)")
        raise typer.Exit(2) from exc


def run_agent_demo(
    model: str, plan: AgentPlan, output: Path, placement: Placement, seed: int, gym: str | None
) -> dict[str, Any]:
    """The whole pipeline (module docstring); prints the table and returns the record it writes."""
    from gym_server.store.repository import TrajectoryFilter
    from gym_server.store.training_sets import NothingToExport, export_training_set
    from gym_trainer.driver import EpisodeSpec
    from gym_trainer.models import (
        VLLM_TINY_HIDDEN_SIZE,
        build_tiny_model,
        build_tiny_tokenizer,
        load_policy,
        load_smollm2,
    )
    from gym_trainer.plots import reward_curve_png
    from gym_trainer.trl import load_curriculum_dataset

    if gym is not None:  # the export reads the store, which only a gym started here has at hand
        console.print("[red]error:[/] gym-server demo --agent starts its own gym; drop --gym")
        raise typer.Exit(2)
    if plan.policy not in ("vllm", "local"):
        raise typer.BadParameter("--policy must be vllm or local")
    refusal = None
    saved = None if plan.warm_start is None else _warm_start_model(Path(plan.warm_start))
    if plan.max_staleness and plan.policy != "vllm":
        # asynchronous rollouts sample while the optimizer writes the trainer's weights: they need a
        # policy server of their own (docs/rollout-buffer.md)
        refusal = "--max-staleness above 0 needs --policy vllm"
    elif plan.compare_sync and not plan.max_staleness:
        refusal = "--compare-sync pairs asynchronous runs with synchronous ones: give --max-staleness"
    elif plan.warm_start is not None and not (Path(plan.warm_start) / "config.json").is_file():
        refusal = f"--warm-start {plan.warm_start}: not a saved model folder (an earlier run's sft-model/)"
    elif saved not in (None, model):
        # the runs' labels (agent-<model>@...) and the choice of LoRA follow --model
        refusal = f"--warm-start {plan.warm_start} is a {saved} warm start: give --model {saved}"
    if refusal:
        console.print(f"[red]error:[/] gym-server demo --agent: {refusal}")
        raise typer.Exit(2)
    vllm = _Served(_vllm_python(plan), output) if plan.policy == "vllm" else None
    started = time.monotonic()
    timings: dict[str, float] = {}
    output.mkdir(parents=True, exist_ok=True)
    store = output / "gym.db"
    store.unlink(missing_ok=True)  # a store of an earlier run would feed its episodes to the export
    run = f"demo-agent-{model}-{int(time.time())}"
    options = {
        "max_completion": plan.max_completion,
        "max_turns": 4,
        "eval_temperature": plan.eval_temperature,
        "run": run,
        "model": f"agent-{model}",
        # every held-out episode in one sampling batch: on a CPU a decoding step costs about the same for
        # 16 sequences as for 64 (it reads the weights once), so one batch of 64 is the cheapest
        "batch": 64,
    }

    def lap(name: str, since: float) -> float:
        now = time.monotonic()
        timings[name] = round(now - since, 1)
        console.print(f"[dim]{name}: {timings[name]:.0f} s[/]")
        return now

    with local_gym(None, store) as gym_url:
        policy: Any
        if plan.warm_start is not None:
            policy, tokenizer = load_policy(plan.warm_start, placement=placement)
        elif model == "tiny":
            tokenizer = build_tiny_tokenizer()
            hidden = VLLM_TINY_HIDDEN_SIZE if vllm else 64  # vLLM's CPU attention wants head size >= 32
            policy = placement.place(build_tiny_model(tokenizer, seed=seed, hidden_size=hidden))
        else:
            policy, tokenizer = load_smollm2(placement)
        from gym_trainer.client import SyncGymClient

        with SyncGymClient(gym_url) as client:
            held_out = client.all_tasks(AGENT_ENV, split="validation")[: plan.eval_tasks]
            probe = client.all_tasks(AGENT_ENV, split="train")[: plan.probe_tasks]
        specs = [EpisodeSpec(AGENT_ENV, t["id"], None, 0, k) for k, t in enumerate(held_out)]

        def evaluate(
            policy_now: Any, phase: str, label: str, tasks: list[Any] | None = None
        ) -> dict[str, Any]:
            console.print(f"evaluating {label} ({phase})…")
            summary = evaluate_held_out(
                None if vllm else policy_now,
                tokenizer,
                gym_url,
                tasks or specs,
                options,
                phase=phase,
                label=label,
                served=vllm.url if vllm else None,
            )
            console.print(f"{label}: success {summary['success_rate']} over {summary['episodes']} episodes")
            return summary

        # SmolLM2 trains a LoRA adapter; the tiny model is trained whole, but for vLLM, which takes
        # the trainer's weights as an adapter (docs/vllm.md)
        lora = model == "smollm2" or vllm is not None
        mark = time.monotonic()
        evals: dict[str, dict[str, Any]] = {}
        rows: int | None = None
        if plan.warm_start is not None:  # an earlier run's sft-model/: straight to its evaluation and GRPO
            warm, warm_dir = policy, Path(plan.warm_start)
        else:
            base_label = f"agent-{model}@base"
            if vllm:
                base = output / "base-model"
                policy.save_pretrained(str(base))
                tokenizer.save_pretrained(str(base))
                with vllm.serving(base, base_label, lora=False):
                    evals["base"] = evaluate(None, "base", base_label)
            else:
                evals["base"] = evaluate(policy, "base", base_label)
            mark = lap("evaluate base", mark)

            solved = play_reference_demonstrations(gym_url, AGENT_ENV, plan.demos, f"{run}-demos", seed)
            sft_file = output / "sft.jsonl"
            try:
                rows = export_training_set(
                    f"sqlite:///{store.resolve()}",
                    sft_file,
                    "sft",
                    "jsonl",
                    min_reward=1.0,
                    where=TrajectoryFilter(run=f"{run}-demos"),
                )
            except NothingToExport as exc:
                console.print(f"[red]error:[/] no demonstration to train on: {exc}")
                raise typer.Exit(1) from exc
            console.print(
                f"demonstrations: {solved} of {plan.demos} reference episodes scored 1; {rows} SFT rows"
            )
            mark = lap("demonstrations and export", mark)

            warm = _sft(policy, tokenizer, sft_file, output / "sft", placement, plan, lora=lora)
            warm_dir = output / "sft-model"  # the warm start, for GRPO runs of one's own (and vLLM's)
            warm.save_pretrained(str(warm_dir))
            tokenizer.save_pretrained(str(warm_dir))
            (warm_dir / WARM_START_RECORD).write_text(json.dumps({"model": model}))
            mark = lap("SFT", mark)
        sft_label = f"agent-{model}@sft"
        with contextlib.ExitStack() as stack:
            if vllm:  # the warm start, served with LoRA on: each GRPO run's adapter is loaded into it
                stack.enter_context(vllm.serving(warm_dir, sft_label, lora=True))
                mark = lap("start vLLM for the warm start", mark)
            evals["sft"] = evaluate(warm, "sft", sft_label)
            mark = lap("evaluate SFT", mark)

            # the curriculum reads the warm start's pass rates on a probe of training tasks (its own run)
            probe_specs = [EpisodeSpec(AGENT_ENV, t["id"], None, 1, k) for k, t in enumerate(probe)]
            evaluate(warm, "probe", sft_label, probe_specs)
            size = plan.grpo_steps * plan.prompts_per_step
            choice = {"rule": "difficulty", "policy": sft_label, "run": f"{run}-probe"}
            samplings = {"curriculum": choice, **({"uniform": None} if plan.compare_uniform else {})}
            curves: dict[str, list[float | None]] = {}
            rules: dict[str, str] = {}
            step_times: dict[str, dict[str, Any]] = {}
            mark = lap("probe", mark)
            for name, task_choice, staleness in _grpo_runs(samplings, plan):
                dataset = load_curriculum_dataset(
                    gym_url, [AGENT_ENV], size, task_choice=task_choice, seed=seed
                )
                rules[name] = str(dataset[0]["curriculum_rule"])
                label = f"agent-{model}@grpo-{name}"
                trained, curves[name], step_times[name] = _grpo(
                    copy.deepcopy(warm),
                    tokenizer,
                    dataset,
                    gym_url,
                    f"{run}-grpo-{name}",
                    output / name,
                    placement,
                    plan,
                    seed,
                    lora=lora,
                    served=vllm,
                    adapter=label,
                    max_staleness=staleness,
                )
                mark = lap(f"GRPO ({name})", mark)
                evals[f"grpo-{name}"] = evaluate(trained, f"eval-grpo-{name}", label)
                mark = lap(f"evaluate GRPO ({name})", mark)

    for summary in evals.values():
        successes = round((summary["success_rate"] or 0.0) * summary["scored"])
        summary["successes"] = successes
        summary["wilson95"] = wilson_interval(successes, summary["episodes"])
    series = {name: f"GRPO training reward ({name})" for name in curves}
    reward_curve_png(
        output / "reward_curve.png",
        {series[name]: curve for name, curve in curves.items()},
        title=f"{model} on {AGENT_ENV}: SFT warm start, then GRPO",
        held_out={phase: summary["success_rate"] for phase, summary in evals.items()},
        held_out_of={f"grpo-{name}": label for name, label in series.items()},  # each run's in its colour
    )
    wall = round(time.monotonic() - started, 1)
    record = {
        "model": model,
        "env": AGENT_ENV,
        "device": placement.describe(),
        "policy_server": plan.policy,
        "plan": asdict(plan),
        "run": run,
        "sft_rows": rows,
        "evaluations": evals,
        "train_reward_per_step": curves,
        "step_seconds": step_times,
        "curriculum_rule": rules,
        "timings_s": timings,
        "wall_seconds": wall,
        "load_average": os.getloadavg(),
        "store": f"sqlite:///{store.resolve()}",
    }
    (output / "demo.json").write_text(json.dumps(record, indent=2))
    _report(model, evals, wall)
    console.print(f"reward curve: {output / 'reward_curve.png'}; record: {output / 'demo.json'}")
    return record


def _report(model: str, evals: dict[str, dict[str, Any]], wall: float) -> None:
    table = Table(
        "policy",
        "held-out success",
        "95% interval (Wilson)",
        "episodes",
        "parse errors",
        title=f"{model} on {AGENT_ENV} (validation)",
    )
    for phase, summary in evals.items():
        low, high = summary["wilson95"]
        table.add_row(
            phase,
            f"{summary['successes']}/{summary['episodes']} = {summary['success_rate'] or 0.0:.2f}",
            f"{low:.2f}–{high:.2f}",
            str(summary["episodes"]),
            str(summary["parse_errors"]),
        )
    Console().print(table)
    console.print(f"wall time {wall:.0f} s, load average {os.getloadavg()[0]:.2f}")
