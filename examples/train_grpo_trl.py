"""Train a policy with TRL's GRPO against a running gym server, token-exact and multi-turn.

Two configurations:

- `--config cpu` (default; the name is historical: "in process"): the model trains and samples in this
  process (`use_vllm=False`), on `--device` (auto: the GPU when there is one, else the CPU) in `--dtype`
  (auto: bf16 on a GPU, fp32 on the CPU; see `gym_trainer.devices`); rollouts sample from
  the trainer's own weights, so they are always on-policy. On one GPU this is the no-vLLM path.
  `--model tiny` (the default) runs the recipe of the CPU training test: the 0.1 M-parameter test model
  is first warmed up to write counter tool calls (a few seconds of supervised steps), then GRPO trains it
  at lr 1e-3 on counter tasks whose target is the start value + 3 (one right call, `add(3)`); the
  printed mean reward per step rises within about 30 steps. (A cold tiny model never writes a tool call,
  so its reward would never move; `gym-server demo --model tiny` trains a harder variant, where the
  prompt names the amount: docs/trl.md.) `--model smollm2 --lora` trains SmolLM2-135M on `--env`.
- `--config gpu`: vLLM serves the policy (server mode) and TRL pushes the weights into it before each
  generation over vLLM's NCCL weight-transfer engine; rollouts sample through vLLM's token-in
  `/v1/completions`. LoRA via PEFT (TRL merges the adapter before each weight push, so vLLM needs no LoRA
  support). TRL 1.16 supports vLLM 0.22.0 to 0.31.0, in the server and in this process (the trainer
  side of the weight transfer is vLLM code). Start vLLM first, on its own GPU (NCCL puts the two ranks
  on distinct devices):

      VLLM_SERVER_DEV_MODE=1 vllm serve Qwen/Qwen2.5-0.5B-Instruct --port 8001 \\
          --weight-transfer-config '{"backend": "nccl"}' --logprobs-mode processed_logprobs --max-logprobs -1

Every option's default can come from the environment (`ENVIRONMENT` below names the variables), which is
how compose.yaml's `trainer` service configures it.

Run a gym first (`gym-server serve`), then for example:

    python examples/train_grpo_trl.py --model tiny --steps 30
    python examples/train_grpo_trl.py --env counter --model smollm2 --lora --steps 30
    python examples/train_grpo_trl.py --config gpu --model Qwen/Qwen2.5-0.5B-Instruct \\
        --vllm-url http://127.0.0.1:8001 --env tool_call --steps 500

Each step's gym metrics go to `--tracker` (trackio by default; wandb offline, mlflow, or none: see
docs/tracking.md).

Needs `pip install 'gym-server[trl]'` (torch, transformers, trl, peft, datasets), and
`'gym-server[tracking]'` for a tracker other than none.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gym_trainer.devices import Placement

# Environment variables that set an option's default (compose.yaml's `trainer` service sets them).
ENVIRONMENT = {
    "GYM_URL": "gym_url",
    "GYM_ENV": "env",
    "POLICY_URL": "vllm_url",
    "POLICY_MODEL": "model",
    "OUTPUT_DIR": "output",
    "TRAIN_STEPS": "steps",
    "TRAIN_RUN": "run",
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", choices=["cpu", "gpu"], default="cpu")
    parser.add_argument("--gym-url", default="http://127.0.0.1:8000")
    parser.add_argument("--env", default="counter")
    parser.add_argument("--split", default="train")
    parser.add_argument("--tasks", type=int, default=64, help="tasks taken from the split")
    parser.add_argument(
        "--model", default="tiny", help="tiny, smollm2, a saved directory, or (gpu) a model id"
    )
    parser.add_argument("--lora", action="store_true", help="train a LoRA adapter instead of all weights")
    parser.add_argument("--vllm-url", default="http://127.0.0.1:8001", help="the vLLM server (gpu)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--generations", type=int, default=8, help="GRPO group size")
    parser.add_argument("--prompts-per-step", type=int, default=2)
    parser.add_argument("--max-completion", type=int, default=256, help="model + environment tokens")
    parser.add_argument("--max-turns", type=int, default=6)
    parser.add_argument("--lr", type=float, default=None)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--run", default="grpo-example")
    parser.add_argument("--output", default="var/grpo-example")
    parser.add_argument("--seed", type=int, default=0)
    from gym_trainer.devices import DEVICE_HELP, DTYPE_HELP

    parser.add_argument("--device", default="auto", help=f"--config cpu: {DEVICE_HELP}")
    parser.add_argument("--dtype", default="auto", help=f"--config cpu: {DTYPE_HELP}")
    from gym_trainer.tracking import add_tracking_arguments

    add_tracking_arguments(parser, default_project="grpo-example")
    parser.set_defaults(
        **{dest: os.environ[name] for name, dest in ENVIRONMENT.items() if os.environ.get(name)}
    )
    return parser.parse_args(argv)


def load_model(args: argparse.Namespace, placement: Placement | None) -> tuple[Any, Any]:
    if args.config == "gpu" and args.model != "smollm2":
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.model, padding_side="left")
        return AutoModelForCausalLM.from_pretrained(args.model, dtype="bfloat16"), tokenizer
    from gym_trainer.models import load_policy

    return load_policy(args.model, seed=args.seed, placement=placement)


def _cpu_learning_rate(args: argparse.Namespace) -> float:
    """The tiny recipe's rate (as `gym-server demo`), LoRA's, or full fine-tuning's."""
    if args.model == "tiny":
        return 1e-3
    return 5e-5 if args.lora else 1e-5


def main() -> None:
    args = parse_args()
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl import GRPOConfig, GRPOTrainer

    from gym_trainer.devices import resolve_or_exit
    from gym_trainer.samplers import CompletionsSampler
    from gym_trainer.tracking import tracker_from_args
    from gym_trainer.trl import GymRolloutFunc, gym_reward, load_gym_dataset

    placement = resolve_or_exit(args.device, args.dtype) if args.config == "cpu" else None
    if args.model == "tiny":
        if placement is None or args.env != "counter":
            raise SystemExit("--model tiny runs the warmed-up counter recipe: --config cpu --env counter")
        from datasets import Dataset
        from gym_trainer.warmup import offset_task_prompts, tiny_counter_recipe

        model, tokenizer, train, _held_out = tiny_counter_recipe(args.gym_url, seed=args.seed)
        model = placement.place(model)  # warmed up on the CPU
        dataset = Dataset.from_list(offset_task_prompts(train))
    else:
        model, tokenizer = load_model(args, placement)
        dataset = load_gym_dataset(args.gym_url, args.env, split=args.split, limit=args.tasks)
    batch = args.generations * args.prompts_per_step
    common: dict[str, Any] = {
        "output_dir": args.output,
        "per_device_train_batch_size": batch,
        "num_generations": args.generations,
        "max_completion_length": args.max_completion,
        "max_steps": args.steps,
        "logging_steps": 1,
        "temperature": args.temperature,
        "beta": 0.0,
        "seed": args.seed,
        "report_to": "none",
        "save_strategy": "no",
    }
    peft_config = None
    if args.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(
            r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM"
        )
    if placement is not None:
        config = GRPOConfig(
            use_cpu=not placement.is_cuda,
            use_vllm=False,
            # TRL defaults to bf16 autocast even on a CPU: slower there, and not the precision of sampling;
            # autocast follows the placement's dtype, the one the sampler's weights are in.
            bf16=placement.bf16,
            learning_rate=args.lr or _cpu_learning_rate(args),
            **common,
        )
        sampler = None  # GymRolloutFunc samples from trainer.model in process
    else:
        config = GRPOConfig(
            use_vllm=True,
            vllm_mode="server",
            vllm_server_base_url=args.vllm_url,
            bf16=True,
            gradient_checkpointing=True,
            learning_rate=args.lr or (1e-5 if args.lora else 1e-6),
            **common,
        )
        sampler = CompletionsSampler(args.vllm_url, model=args.model)
    tracker = tracker_from_args(args, run=args.run, config=vars(args))
    rollout = GymRolloutFunc(
        args.gym_url, sampler=sampler, max_turns=args.max_turns, run=args.run, seed=args.seed, tracker=tracker
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[gym_reward],
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=rollout,
        peft_config=peft_config,
    )
    trainer.train()
    for entry in rollout.history:
        mean = entry["mean_reward"]
        shown = f"{mean:.3f}" if mean is not None else "-"
        print(f"step {entry['step']:>4}  mean reward {shown}  endings {entry['stop_reasons']}")
    trainer.save_model(args.output)
    tracker.finish()
    rollout.close()


if __name__ == "__main__":
    main()
