"""A supervised warm-up that teaches the tiny model to write counter tool calls, and its tasks.

A randomly initialised model never writes a parseable tool call, so reinforcement learning from it has
no signal. The CPU training test, the rollout benchmark and the tiny demo therefore start from a few
dozen supervised steps on `add(k)` then `submit` with k drawn from a small set; GRPO must then find the
k the gym rewards. The tasks are inline counter tasks whose target is the seeded start value plus an
offset: one for all (`counter_offset_tasks`, the training test's), or the amount each prompt names
(`counter_amount_tasks`, the demo's, with `counter_vocabulary` for a tokenizer in which the tiny model can
read it). Start values are read through the gym, not recomputed, so the environment stays a black box.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from gym_trainer.chat import TOOLS_INTRO, TOOLS_OUTRO, ChatRenderer
from gym_trainer.client import SyncGymClient
from gym_trainer.toolcalls import render_tool_call

__all__ = [
    "AMOUNT_PROMPT",
    "counter_amount_tasks",
    "counter_example",
    "counter_offset_tasks",
    "counter_vocabulary",
    "offset_task_prompts",
    "tiny_counter_recipe",
    "warm_up",
    "warm_up_counter",
]

_READ = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "probe", "type": "function", "function": {"name": "read", "arguments": "{}"}}],
}


def counter_offset_tasks(
    gym: SyncGymClient,
    n: int,
    offset: int = 3,
    *,
    first_seed: int = 0,
    prefix: str = "learn",
    run: str = "warmup-probe",
    metadata: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """n inline counter tasks `<prefix>-<seed>` (seeds `first_seed` up), with target = start + offset.

    Each entry: `task` (the inline task), `seed`, `start`, `amount` (the offset), and the session's
    `opening` messages and `tools` (for rendering warm-up examples exactly as episodes will be rendered).
    A task's start value is the gym's: one probe episode reads it (stored as run `run`, with `metadata`,
    and left `abandoned` once read), so the environment stays a black box.
    """
    return [
        _probed_task(
            gym,
            f"{prefix}-{seed}",
            seed,
            offset,
            "Bring the counter to {target}, then submit.",
            run,
            metadata,
        )
        for seed in range(first_seed, first_seed + n)
    ]


# How `counter_amount_tasks` names the amount: last, so it is the prompt's final token before the turn ends.
AMOUNT_PROMPT = "Add to the counter, then submit. The amount to add: "


def counter_amount_tasks(
    gym: SyncGymClient,
    n: int,
    amounts: Sequence[int] = (1, 2, 3, 4),
    *,
    first_seed: int = 0,
    prefix: str = "learn",
    run: str = "warmup-probe",
    metadata: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """n inline counter tasks whose prompt names the amount to add (`AMOUNT_PROMPT` + the amount): task
    i adds `amounts[i % len(amounts)]`, so the right call depends on the prompt and a policy that always
    makes one call solves at most the share of tasks with that amount. Entries as `counter_offset_tasks`.
    """
    return [
        _probed_task(
            gym,
            f"{prefix}-{seed}",
            seed,
            amounts[i % len(amounts)],
            AMOUNT_PROMPT + "{amount}",
            run,
            metadata,
        )
        for i, seed in enumerate(range(first_seed, first_seed + n))
    ]


def _probed_task(
    gym: SyncGymClient,
    name: str,
    seed: int,
    amount: int,
    prompt: str,
    run: str,
    metadata: dict[str, Any] | None,
) -> dict[str, Any]:
    """A counter task of `seed` whose target is its start value + `amount`; `prompt` is formatted with
    `target` and `amount`. The start value is read by a probe episode (see `counter_offset_tasks`)."""
    probe_task = {"id": name, "prompt": "probe: read the start value", "answer": 0}
    probe = gym.create_session("counter", task=probe_task, seed=seed, run=run, metadata=metadata)
    start = int(gym.step(probe.session_id, _READ).messages[0]["content"])
    gym.close(probe.session_id)
    target = start + amount
    task = {"id": name, "prompt": prompt.format(target=target, amount=amount), "answer": target}
    return {
        "task": task,
        "seed": seed,
        "start": start,
        "amount": amount,
        "opening": probe.messages,
        "tools": probe.tools,
    }


def counter_vocabulary(task: dict[str, Any]) -> list[str]:
    """The texts every prompt of `task`'s kind shares, for `models.build_tiny_tokenizer(vocabulary=...)`:
    the system prompt, the chat template's text around the tool schemas, each schema as the template
    writes it, and `AMOUNT_PROMPT`. Spelled in bytes they are ~830 of a prompt's 854 tokens; as one token
    each the prompt is 24, where the tiny model can learn to find the amount."""
    from gym_trainer.models import build_tiny_tokenizer

    opening = [task["opening"][0], {"role": "user", "content": "-"}]
    text = build_tiny_tokenizer().apply_chat_template(opening, tools=task["tools"], tokenize=False)
    schemas = text.split(TOOLS_INTRO, 1)[1].split(TOOLS_OUTRO, 1)[0].split("\n")[1:]
    return [task["opening"][0]["content"], TOOLS_INTRO, *schemas, TOOLS_OUTRO, AMOUNT_PROMPT]


def warm_up_counter(
    model: Any,
    tokenizer: Any,
    tasks: Sequence[dict[str, Any]],
    *,
    amounts: Sequence[int] = (1, 2, 3, 4),
    right_share: float = 0.0,
    steps: int = 100,
    batch: int = 8,
    lr: float = 1e-2,
    seed: int = 0,
) -> list[float]:
    """Supervised steps on episodes `add(k)`, tool reply, `submit` (loss on the model's turns only).
    Returns the loss of every step. `amounts`, `right_share`: as `counter_example`."""
    example = counter_example(tokenizer, tasks, amounts, right_share)
    return warm_up(model, tokenizer, example, steps=steps, batch=batch, lr=lr, seed=seed)


def counter_example(
    tokenizer: Any,
    tasks: Sequence[dict[str, Any]],
    amounts: Sequence[int] = (1, 2, 3, 4),
    right_share: float = 0.0,
) -> Callable[[random.Random], tuple[list[int], list[int]]]:
    """`warm_up_counter`'s examples: a task of `tasks`, `add(k)`, the tool's reply, `submit`; as (token
    ids, labels with -100 outside the model's turns). k is the task's own amount in a `right_share` of the
    examples and drawn from `amounts` otherwise: 0 teaches the calls and no amount (a policy that samples
    amounts regardless of its prompt), 1 the right call every time."""
    renderer = ChatRenderer(tokenizer)
    eos = int(tokenizer.eos_token_id)

    def example(rng: random.Random) -> tuple[list[int], list[int]]:
        task = rng.choice(list(tasks))
        opening = [task["opening"][0], {"role": "user", "content": task["task"]["prompt"]}]
        prompt = renderer.render_prompt(opening, task["tools"]).ids
        right = right_share > 0 and rng.random() < right_share  # no draw at 0: examples as before
        k = task["amount"] if right else rng.choice(list(amounts))
        first = [*renderer.encode(render_tool_call("add", {"amount": k})), eos]
        reply = renderer.render_delta([{"role": "tool", "content": str(task["start"] + k)}]).ids
        second = [*renderer.encode(render_tool_call("submit", {})), eos]
        ids = prompt + first + reply + second
        return ids, [-100] * len(prompt) + first + [-100] * len(reply) + second

    return example


def warm_up(
    model: Any,
    tokenizer: Any,
    example: Callable[[random.Random], tuple[list[int], list[int]]],
    *,
    steps: int,
    batch: int = 8,
    lr: float = 1e-2,
    seed: int = 0,
) -> list[float]:
    """Supervised steps on batches of `example(rng)`: (token ids, labels with -100 where no loss).
    Returns the loss of every step; torch's global random state is left as it was."""
    import torch

    rng = random.Random(seed)
    pad = int(tokenizer.pad_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
        was_training = bool(model.training)
        model.train()
        losses = []
        for _ in range(steps):
            rows = [example(rng) for _ in range(batch)]
            width = max(len(ids) for ids, _ in rows)
            ids = torch.tensor([i + [pad] * (width - len(i)) for i, _ in rows])
            labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in rows])
            mask = torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i, _ in rows])
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
        model.train(was_training)
    return losses


def tiny_counter_recipe(
    gym_url: str,
    seed: int = 0,
    n_tasks: int = 16,
    api_key: str | None = None,
    steps: int = 100,
    hidden_size: int = 64,
    amounts: Sequence[int] = (1, 2, 3, 4),
) -> tuple[Any, Any, list[dict[str, Any]], list[dict[str, Any]]]:
    """The tiny model, warmed up on counter tool calls, with its offset tasks split in train and held-out.

    The recipe of `gym-server demo --model tiny` and `examples/train_grpo_trl.py --model tiny`: GRPO from
    here moves the reward within tens of steps (at a learning rate near 1e-3); from a cold tiny model it
    never does. Returns (model, tokenizer, train tasks, held-out tasks), tasks as `counter_offset_tasks`.
    `api_key`: the gym's key, when it requires one (default `$GYM_API_KEY`). `steps`: supervised steps; at
    100 many calls sampled at temperature 1 are malformed (1 in 8 well-formed, seen once), at 300 nearly none.
    `hidden_size`: 128 for a model vLLM's CPU attention serves (`models.VLLM_TINY_HIDDEN_SIZE`).
    `amounts`: the `add` amounts shown; `(3,)` teaches the one move that solves these tasks (the offset
    is 3), what `models.export_tiny_counter` builds for the docs' examples.
    """
    from gym_trainer.models import build_tiny_model, build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer, seed=seed, hidden_size=hidden_size)
    with SyncGymClient(gym_url, api_key=api_key) as gym:
        tasks = counter_offset_tasks(gym, n_tasks)
    train, held_out = tasks[: n_tasks // 2], tasks[n_tasks // 2 :]
    warm_up_counter(model, tokenizer, train, amounts=amounts, steps=steps, seed=seed)
    return model, tokenizer, train, held_out


def offset_task_prompts(tasks: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Dataset rows (`{"prompt": ...}`) for GRPO over `counter_offset_tasks`, inline tasks and seeds."""
    from gym_trainer.trl import gym_prompt

    return [
        {"prompt": gym_prompt("counter", t["task"]["prompt"], task=t["task"], seed=t["seed"])} for t in tasks
    ]
