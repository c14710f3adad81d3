"""GRPO steps through the gym with a real vLLM as the policy, run by the project's python (TRL, PEFT).

`python grpo_steps.py warm --gym URL --model-dir DIR` writes the tiny model with head size 32 (which
vLLM's CPU attention serves), warmed up on counter tool calls (`tiny_counter_recipe`, the recipe of
`gym-server demo --model tiny`), with its tasks in `DIR/tasks.json`: from there GRPO's groups have
rewards that differ, so the optimizer moves the adapter. Then
`python grpo_steps.py train --vllm URL --gym URL --model-dir DIR --steps 3 --output OUT` trains a fresh LoRA
adapter on `counter` with `GymRolloutFunc` sampling from vLLM under the adapter's name, and
`VLLMWeightSync` loading the adapter into vLLM before the first step and after every step, each update
checked by a `LogprobProbe`; `--max-staleness 1` plays the next step's groups while a step trains
(the gym's rollout buffer). It writes `OUT/result.json`: the updates' timings, the probe's records, and
each step's session ids, so that the test reads from the gym which weight version sampled each episode.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from gym_trainer.chat import ChatRenderer
from gym_trainer.devices import resolve
from gym_trainer.models import VLLM_TINY_HIDDEN_SIZE, load_policy
from gym_trainer.samplers import CompletionsSampler
from gym_trainer.trl import GymRolloutFunc, grpo_args, gym_reward, lora_config
from gym_trainer.trl.weight_sync import VLLMWeightSync
from gym_trainer.vllm import LogprobProbe, LoraSync
from gym_trainer.warmup import offset_task_prompts, tiny_counter_recipe


def warm(options: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(1)
    model, tokenizer, train, _ = tiny_counter_recipe(
        options.gym, n_tasks=8, steps=options.warm_steps, hidden_size=VLLM_TINY_HIDDEN_SIZE
    )
    model.save_pretrained(options.model_dir)
    tokenizer.save_pretrained(options.model_dir)
    tasks = [{"task": t["task"], "seed": t["seed"]} for t in train]
    (options.model_dir / "tasks.json").write_text(json.dumps(tasks))


def train(options: argparse.Namespace) -> None:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    import trl

    from datasets import Dataset

    torch.set_num_threads(1)
    placement = resolve("cpu", "fp32")
    model, tokenizer = load_policy(str(options.model_dir), placement=placement)
    tasks = json.loads((options.model_dir / "tasks.json").read_text())
    dataset = Dataset.from_list(offset_task_prompts(tasks))
    renderer = ChatRenderer(tokenizer)
    prompt = renderer.render_prompt([{"role": "user", "content": "Bring the counter to 26, then submit."}])
    # a few tokens the model would write, each of which the adapter's update moves
    completion = tokenizer.encode('<tool_call>\n{"name": "add", "arguments": {"amount": 3}}\n</tool_call>')
    probe = LogprobProbe(options.vllm, options.adapter, list(prompt.ids), list(completion))
    sync = LoraSync(options.vllm, options.adapter, options.output / "adapters")
    sampler = CompletionsSampler(options.vllm, options.adapter, seed_requests=False)
    rollout = GymRolloutFunc(
        options.gym,
        sampler=sampler,
        max_turns=3,
        run=f"vllm-grpo-staleness{options.max_staleness}",
        seed=0,
        max_staleness=options.max_staleness,
    )
    steps: list[dict[str, object]] = []
    original = rollout.__call__

    def recording(prompts: list[object], trainer: object) -> dict[str, list[object]]:
        columns = original(prompts, trainer)
        steps.append(
            {
                "step": int(trainer.state.global_step),  # type: ignore[attr-defined]
                "sessions": [r.session_id for r in rollout.last_rollouts],
                "completion_tokens": sum(len(ids) for ids in columns["completion_ids"]),
            }
        )
        return columns

    args = grpo_args(
        options.output / "trainer",
        placement,
        reward_weights=[1.0],
        generations=4,
        prompts_per_step=1,
        max_completion=64,
        lr=options.lr,
        steps=options.steps,
        seed=0,
    )
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=[gym_reward],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=recording,
        peft_config=lora_config(),
        callbacks=[VLLMWeightSync(sync, probe)],
    )
    try:
        trainer.train()
    finally:
        rollout.close()
    result = {
        "updates": [t.__dict__ for t in sync.timings],
        "probe": probe.records,
        "steps": steps,
        "adapter": options.adapter,
    }
    (options.output / "result.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result["probe"], indent=1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["warm", "train"])
    parser.add_argument("--gym", required=True)
    parser.add_argument("--model-dir", required=True, type=Path)
    parser.add_argument("--vllm")
    parser.add_argument("--output", type=Path)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warm-steps", type=int, default=100)
    parser.add_argument("--adapter", default="policy-lora")
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--max-staleness", type=int, default=0, help="GymRolloutFunc's bound (0: sync)")
    options = parser.parse_args()
    (warm if options.what == "warm" else train)(options)


if __name__ == "__main__":
    main()
