"""TRL 1.x `rollout_func`: multi-turn, token-exact gym episodes for `GRPOTrainer`.

`GRPOTrainer(..., rollout_func=GymRolloutFunc(...))` hands the function each process's prompts, already
repeated `num_generations` times (consecutive copies form a group). For every prompt the function
plays one gym episode with the `RolloutDriver` and returns, in prompt order, `prompt_ids`,
`completion_ids`, `logprobs` and `env_mask` (1 on sampled tokens, 0 on environment tokens, which TRL
keeps out of the loss), plus per-sample extras that reach reward functions as keyword lists:
`gym_reward` (None when there is no signal: TRL then gives the sample no advantage), `gym_components`,
`gym_failure`, `gym_stop_reason`, `gym_session_id`, `gym_task_id`.

Which task a prompt means: dataset prompts built by `gym_prompt` / `load_gym_dataset` carry the task in
their first message (`gym_env`, `gym_task_id` or `gym_task`, optional `gym_seed`); the episode's real
opening messages come from the gym session, so the dataset prompt is only a key. A group shares its
task and gym seed (from `gym_seed`, else derived from the training step and the group's position).

Sampling: by default a `LocalSampler` over `trainer.model` (on-policy, CPU, `use_vllm=False`); pass a
`CompletionsSampler` for vLLM (with `use_vllm=True, vllm_mode="server"`, TRL pushes the weights into
the same server before each generation). `max_completion_length`, `temperature` and `top_p` come from
the trainer's config. Do not pass `tools` or `environment_factory` together with this function.

Tree groups: with `tree=TreeShape(...)` each group is sampled as a tree (`trainer_adapters.tree`): one
episode, then the group's other samples forked from its turns, the prefix generated once. Each sample's
columns stay exact (the prefix's tokens verbatim), and the extras `gym_parent_session_id`,
`gym_branch_turn` and `gym_branch_token` say where it branches (None on the root and in flat groups).

Asynchronous rollouts: `max_staleness=k` (k >= 1) plays the next steps' groups while this one trains,
through the gym's rollout buffer (`BufferedRollouts`, docs/rollout-buffer.md): every call announces the
trainer's step as the policy version and returns complete groups at most k versions old; 0 (the
default) is the synchronous loop. It needs a policy server (a `CompletionsSampler`): the in-process
`LocalSampler` would sample from weights the optimizer is writing.

Tracking: pass `tracker=open_tracker(...)` (`trainer_adapters.tracking`) and every step's episodes are
logged as `rollout_metrics` at the trainer's global step; the caller finishes the tracker.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gym_trainer._loop import BackgroundLoop
from gym_trainer.buffered import BUFFER_GROUP_KEY, BufferedRollouts
from gym_trainer.chat import ChatRenderer
from gym_trainer.client import GymClient
from gym_trainer.driver import DriverConfig, EpisodeSpec, Rollout, RolloutDriver, summarize
from gym_trainer.samplers.base import SamplingParams, TokenSampler
from gym_trainer.samplers.local import LocalSampler
from gym_trainer.tracking.backends import Tracker
from gym_trainer.tracking.metrics import rollout_metrics
from gym_trainer.tree import TreeShape, run_tree
from gym_trainer.trl.columns import TrlRow, rollout_columns

__all__ = ["GymRolloutFunc", "gym_prompt", "load_gym_dataset", "prompt_text"]

_KEYS = ("gym_env", "gym_task_id", "gym_task", "gym_seed")


def gym_prompt(
    env: str,
    text: str,
    *,
    task_id: str | None = None,
    task: dict[str, Any] | None = None,
    seed: int | None = None,
) -> list[dict[str, Any]]:
    """A conversational dataset prompt that names its gym task (every row gets the same keys, so
    Arrow stores them as one struct type; `gym_task` is JSON text for the same reason)."""
    return [
        {
            "role": "user",
            "content": text,
            "gym_env": env,
            "gym_task_id": task_id,
            "gym_task": json.dumps(task) if task is not None else None,
            "gym_seed": seed,
        }
    ]


def load_gym_dataset(
    gym_url: str,
    env: str,
    *,
    split: str | None = "train",
    limit: int | None = None,
    seed: int | None = None,
    api_key: str | None = None,
) -> Any:
    """A Hugging Face `Dataset` of an environment's tasks: columns `prompt` (see `gym_prompt`) and
    `task_id`. `api_key`: the gym's key (default `$GYM_API_KEY`). Needs the `datasets` package (the
    `[trl]` extra)."""
    # By module name: `datasets` is an optional extra, imported only when a dataset is built.
    hf_datasets = importlib.import_module("datasets")
    from gym_trainer.client import SyncGymClient

    with SyncGymClient(gym_url, api_key=api_key) as gym:
        tasks = gym.all_tasks(env, split=split)
    tasks = tasks[:limit] if limit is not None else tasks
    rows = [
        {
            "prompt": gym_prompt(env, prompt_text(task["prompt"]), task_id=task["id"], seed=seed),
            "task_id": task["id"],
        }
        for task in tasks
    ]
    return hf_datasets.Dataset.from_list(rows)


def prompt_text(prompt: Any) -> str:
    """A task's prompt as one text: itself, or its last user message."""
    if isinstance(prompt, str):
        return prompt
    users = [m.get("content") or "" for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
    return str(users[-1]) if users else json.dumps(prompt)


def _spec(prompt: Any, default_env: str | None, seed: int | None) -> EpisodeSpec:
    first = prompt[0] if isinstance(prompt, list) and prompt and isinstance(prompt[0], dict) else {}
    env = first.get("gym_env") or default_env
    if not env:
        raise ValueError(
            "the prompt names no gym environment (build prompts with gym_prompt) and no env is set"
        )
    task = first.get("gym_task")
    task_id = first.get("gym_task_id")
    if task is None and task_id is None:
        raise ValueError(
            "the prompt names no gym task: build the dataset with gym_prompt or load_gym_dataset"
        )
    stored_seed = first.get("gym_seed")
    return EpisodeSpec(
        env=str(env),
        task_id=task_id,
        task=json.loads(task) if isinstance(task, str) else task,
        seed=int(stored_seed) if stored_seed is not None else seed,
    )


def _groups(prompts: Sequence[Any]) -> list[int]:
    """The group index of each prompt: consecutive equal prompts are one group (TRL's repeats)."""
    index, groups = -1, []
    for i, prompt in enumerate(prompts):
        if i == 0 or prompt != prompts[i - 1]:
            index += 1
        groups.append(index)
    return groups


@dataclass
class GymRolloutFunc:
    """A callable `rollout_func(prompts, trainer)` for TRL's `GRPOTrainer`.

    Args:
        gym_url: the gym server (or its replicas).
        env: the environment of prompts that do not name one.
        sampler: a token-exact sampler; default: in-process sampling with `trainer.model`.
        max_turns: assistant turns per episode.
        run: the gym run name trajectories are filed under.
        concurrency: episodes played at once (they share the sampler's batches).
        seed: base of the derived gym and sampling seeds (reproducible runs).
        tracker: where each step's `rollout_metrics` are logged (none by default).
        api_key: the gym's key, when it requires one (default `$GYM_API_KEY`).
        tree: sample each group as a tree of this shape (module docstring); None: flat groups.
        max_staleness: 0: synchronous; k >= 1: asynchronous, groups at most k steps old (needs a
            policy server; `run` names the policy run, one is made up when None).
    """

    gym_url: str | list[str]
    env: str | None = None
    sampler: TokenSampler | None = None
    max_turns: int = 8
    run: str | None = None
    concurrency: int = 64
    seed: int = 0
    tracker: Tracker | None = field(default=None, repr=False)
    api_key: str | None = field(default=None, repr=False)
    tree: TreeShape | None = None
    max_staleness: int = 0
    last_rollouts: list[Rollout] = field(default_factory=list, repr=False)
    history: list[dict[str, Any]] = field(default_factory=list, repr=False)
    _loop: BackgroundLoop | None = field(default=None, repr=False)
    _gym: GymClient | None = field(default=None, repr=False)
    _renderer: ChatRenderer | None = field(default=None, repr=False)
    _buffered: BufferedRollouts[Rollout] | None = field(default=None, repr=False)
    _config: DriverConfig | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.max_staleness < 0:
            raise ValueError(f"max_staleness is a number of steps, at least 0; got {self.max_staleness}")
        if self.max_staleness and self.tree is not None:
            raise ValueError("tree groups are played synchronously: give max_staleness=0 with tree=")
        if self.max_staleness and self.run is None:
            self.run = f"trl-async-{uuid.uuid4().hex[:12]}"

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        loop, gym = self._connect()
        if self._renderer is None:
            self._renderer = ChatRenderer(getattr(trainer, "processing_class", None) or trainer.tokenizer)
        if self.sampler is None:
            tokenizer = self._renderer.tokenizer
            self.sampler = LocalSampler(
                trainer.model, int(getattr(tokenizer, "pad_token_id", 0) or 0), name="trl"
            )
        step = int(trainer.state.global_step)
        self.sampler.weight_version = str(step)
        args = trainer.args
        config = DriverConfig(
            max_completion_tokens=int(args.max_completion_length),
            max_turns=self.max_turns,
            sampling=SamplingParams(
                max_tokens=int(args.max_completion_length),
                temperature=float(args.temperature),
                top_p=float(args.top_p),
                seed=self.seed * 1_000_003 + step * 10_007,
            ),
            run=self.run,
            metadata={"trainer": "trl", "step": step},
        )
        groups = _groups(prompts)
        specs = []
        for i, (prompt, group) in enumerate(zip(prompts, groups, strict=True)):
            spec = _spec(prompt, self.env, seed=self.seed * 1_000_003 + step * 1_009 + group)
            sample_seed = None if config.sampling.seed is None else config.sampling.seed + i
            specs.append(EpisodeSpec(spec.env, spec.task_id, spec.task, spec.seed, sample_seed))
        if self.max_staleness:
            rollouts = loop.run(self._buffered_step(gym, config, specs, groups, step))
        else:
            driver = RolloutDriver(gym, self.sampler, self._renderer, config)
            if self.tree is None:
                rollouts = loop.run(driver.run_many(specs, self.concurrency))
            else:
                rollouts = loop.run(_tree_groups(driver, gym, specs, groups, self.tree, self.concurrency))
        self.last_rollouts = rollouts
        self.history.append({"step": step, **summarize(rollouts)})
        if self.tracker is not None:
            self.tracker.log(rollout_metrics(rollouts), step)
        return self._to_trl(rollouts, prompts)

    async def _buffered_step(
        self, gym: GymClient, config: DriverConfig, specs: list[EpisodeSpec], groups: list[int], step: int
    ) -> list[Rollout]:
        """The asynchronous step: this step's groups go to the producer, and as many complete groups
        (of this step's prompts or earlier ones) come back, flattened in group order."""
        self._config = config  # the groups played from now on sample with this step's settings
        if self._buffered is None:
            if isinstance(self.sampler, LocalSampler):
                raise ValueError(
                    "max_staleness > 0 samples while the trainer trains: give GymRolloutFunc a policy "
                    "server (sampler=CompletionsSampler(...)), not the trainer's own model"
                )
            assert self.run is not None  # made up in __post_init__
            play, concurrency = self._play_group, self.concurrency
            self._buffered = BufferedRollouts(
                gym, self.run, max_staleness=self.max_staleness, play=play, concurrency=concurrency
            )
        return await self._buffered.step(step, specs, groups)

    async def _play_group(self, group_id: str, specs: Sequence[EpisodeSpec]) -> list[Rollout]:
        assert self._gym is not None and self.sampler is not None and self._renderer is not None
        assert self._config is not None
        config = replace(self._config, metadata={**self._config.metadata, BUFFER_GROUP_KEY: group_id})
        driver = RolloutDriver(self._gym, self.sampler, self._renderer, config)
        return await driver.run_many(specs, len(specs))

    def _connect(self) -> tuple[BackgroundLoop, GymClient]:
        if self._loop is None or self._gym is None:
            self._loop = BackgroundLoop("gym-rollouts")
            self._gym = self._loop.run(_client(self.gym_url, self.api_key))
        return self._loop, self._gym

    def _to_trl(self, rollouts: Sequence[Rollout], prompts: Sequence[Any]) -> dict[str, list[Any]]:
        assert self._renderer is not None
        rows = []
        for rollout, prompt in zip(rollouts, prompts, strict=True):
            prompt_ids = rollout.prompt_ids
            if not prompt_ids:  # the session never opened: render the dataset prompt instead
                prompt_ids = self._renderer.render_prompt(_plain(prompt)).ids
            tokens = (rollout.completion_ids, rollout.logprobs, rollout.env_mask)
            extra = {
                "gym_stop_reason": rollout.stop_reason,
                "gym_parent_session_id": rollout.parent_session_id,
                "gym_branch_turn": rollout.branch_turn,
                "gym_branch_token": rollout.branch_token if rollout.branch_turn is not None else None,
            }
            rows.append(TrlRow(prompt_ids, *tokens, episode=rollout, extra=extra))
        return rollout_columns(rows, eos=self._renderer.primary_eos_id)

    def close(self) -> None:
        """Close the gym connection and the sampling thread (the trainer's model is left alone)."""
        if self._loop is not None and self._gym is not None:
            if self._buffered is not None:
                self._loop.run(self._buffered.aclose())
            self._loop.run(self._gym.aclose())
            if self.sampler is not None:
                self._loop.run(self.sampler.aclose())
            self._loop.stop()
        self._loop = self._gym = self._buffered = None


async def _tree_groups(
    driver: RolloutDriver,
    gym: GymClient,
    specs: Sequence[EpisodeSpec],
    groups: Sequence[int],
    shape: TreeShape,
    concurrency: int,
) -> list[Rollout]:
    """Each group (consecutive specs of one group index) as a tree, in prompt order; at most
    `concurrency` groups at once."""
    firsts: dict[int, EpisodeSpec] = {}
    sizes: dict[int, int] = {}
    for spec, group in zip(specs, groups, strict=True):
        firsts.setdefault(group, spec)
        sizes[group] = sizes.get(group, 0) + 1
    gate = asyncio.Semaphore(concurrency)

    async def one(group: int) -> list[Rollout]:
        async with gate:
            return await run_tree(driver, gym, firsts[group], sizes[group], shape)

    async with asyncio.TaskGroup() as task_group:
        tasks = [task_group.create_task(one(group)) for group in firsts]
    return [rollout for task in tasks for rollout in task.result()]


def _plain(prompt: Any) -> list[dict[str, Any]]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [{"role": m.get("role", "user"), "content": m.get("content") or ""} for m in prompt]


async def _client(url: str | list[str], api_key: str | None) -> GymClient:
    return GymClient(url, api_key=api_key)
