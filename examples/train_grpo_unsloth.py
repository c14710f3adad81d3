"""GRPO with Unsloth and TRL against a running gym server, on one NVIDIA GPU. Unproven: see docs/unsloth.md.

Unsloth loads the policy (4-bit or 16-bit base, a LoRA adapter, its patched kernels) and, with
`--fast-inference`, a vLLM engine inside the same process that shares the LoRA weights, so no weight
push crosses a network. TRL's `GRPOTrainer` (patched by Unsloth on import) plays the episodes through
the gym's `environment_factory`: one gym session per rollout, the environment's tools as methods, the
gym's verdict as the reward (`get_reward`, None when the gym gives no signal).

    pip install 'gym-server[trl]' unsloth        # on the GPU host; Unsloth brings its own torch/vLLM pins
    gym-server serve &                           # or point --gym-url at a running gym
    python examples/train_grpo_unsloth.py --model unsloth/Qwen2.5-1.5B-Instruct --env counter --steps 200

Every option's default can come from the environment (`ENVIRONMENT` names the variables). Without
Unsloth or without a CUDA device the script stops with a message saying so; it has never run on this
project's CPU machines.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
from typing import Any

ENVIRONMENT = {
    "GYM_URL": "gym_url",
    "GYM_ENV": "env",
    "POLICY_MODEL": "model",
    "OUTPUT_DIR": "output",
    "TRAIN_STEPS": "steps",
    "TRAIN_RUN": "run",
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gym-url", default="http://127.0.0.1:8000")
    parser.add_argument("--env", default="counter")
    parser.add_argument("--split", default="train")
    parser.add_argument("--tasks", type=int, default=256, help="tasks taken from the split")
    parser.add_argument("--model", default="unsloth/Qwen2.5-1.5B-Instruct")
    parser.add_argument("--max-seq-length", type=int, default=4096)
    parser.add_argument("--lora-rank", type=int, default=32)
    parser.add_argument("--load-in-4bit", action="store_true", help="QLoRA: a 4-bit base")
    parser.add_argument(
        "--fast-inference",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="generate with Unsloth's in-process vLLM (needs vllm installed)",
    )
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.6, help="vLLM's share")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--generations", type=int, default=8, help="GRPO group size")
    parser.add_argument("--prompts-per-step", type=int, default=2)
    parser.add_argument("--max-completion", type=int, default=1024, help="model + tool tokens")
    parser.add_argument("--lr", type=float, default=5e-6)
    parser.add_argument("--run", default="grpo-unsloth")
    parser.add_argument("--output", default="var/grpo-unsloth")
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(
        **{dest: os.environ[name] for name, dest in ENVIRONMENT.items() if os.environ.get(name)}
    )
    return parser.parse_args(argv)


def require_gpu_stack() -> None:
    """Stop with what is missing, before anything heavy is imported."""
    if importlib.util.find_spec("unsloth") is None:
        raise SystemExit(
            "Unsloth is not installed: pip install unsloth (on a host with an NVIDIA GPU). This recipe is "
            "unproven on CPU; docs/unsloth.md says what is and is not tested."
        )
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("Unsloth needs a CUDA device and none is visible (docs/unsloth.md)")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    require_gpu_stack()
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    # Unsloth first: it patches transformers and TRL when imported.
    unsloth: Any = importlib.import_module("unsloth")
    from trl import GRPOConfig, GRPOTrainer

    from gym_trainer.trl import load_gym_dataset, make_environment_factory

    model, tokenizer = unsloth.FastLanguageModel.from_pretrained(
        model_name=args.model,
        max_seq_length=args.max_seq_length,
        load_in_4bit=args.load_in_4bit,
        fast_inference=args.fast_inference,
        max_lora_rank=args.lora_rank,
        gpu_memory_utilization=args.gpu_memory_utilization,
    )
    model = unsloth.FastLanguageModel.get_peft_model(
        model,
        r=args.lora_rank,
        lora_alpha=args.lora_rank * 2,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        use_gradient_checkpointing="unsloth",
        random_state=args.seed,
    )
    dataset = load_gym_dataset(args.gym_url, args.env, split=args.split, limit=args.tasks)
    config = GRPOConfig(
        output_dir=args.output,
        use_vllm=args.fast_inference,  # Unsloth's patched trainer generates with its in-process engine
        per_device_train_batch_size=args.generations * args.prompts_per_step,
        num_generations=args.generations,
        max_completion_length=args.max_completion,
        max_steps=args.steps,
        learning_rate=args.lr,
        beta=0.0,
        logging_steps=1,
        seed=args.seed,
        report_to="none",
        save_strategy="no",
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[],  # the environment's get_reward is the reward
        args=config,
        train_dataset=dataset,
        environment_factory=make_environment_factory(args.gym_url, args.env, run=args.run),
    )
    trainer.train()
    model.save_pretrained(args.output)  # the LoRA adapter
    tokenizer.save_pretrained(args.output)


if __name__ == "__main__":
    main()
