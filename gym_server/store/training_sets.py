"""Training sets made from scored trajectories: an SFT set and a preference set, as TRL's trainers read them.

The gym's stored episodes are the data of the next training stage: the best episode of each task is a
demonstration (supervised fine-tuning), and two episodes of the same task far apart in reward are a
preference pair (DPO). Both files are conversational, in the column layout TRL documents
(https://huggingface.co/docs/trl/dataset_formats), so `datasets.load_dataset("json" | "parquet", ...)`
hands them to `SFTTrainer` or `DPOTrainer` as they are.

Which episodes count: status `completed`, a reward, no failure class (an episode cut by a budget or an
error is not a clean signal either way). Trailing environment messages after the last assistant turn
are dropped: they carry nothing to learn.

- **SFT** (`messages` + `tools`, language modelling): per (env, task), the episode with the highest
  reward among those at or above `min_reward`; ties go to the fewest turns, then the newest.
- **Preference** (`prompt` / `chosen` / `rejected`, explicit prompt): episodes are grouped by env, task,
  opening (every message before the first assistant turn: the same task under another seed may open
  differently) and tools; in each group the best episode (as above) is chosen against the lowest reward,
  and the pair is kept when their rewards differ by at least `min_margin`. `prompt` is the shared
  opening; `chosen` and `rejected` are the rest of each transcript, tool turns included.

`tools` is the episode's tool schemas as JSON text (TRL parses a string column itself), so rows with
different tools share one Arrow type. Tool calls keep the arguments as the JSON text the policy wrote
(OpenAI's form; Hermes/Qwen-style templates print a string as is). Lineage columns name where each row
came from: trajectory ids, run, env and its version, task, seed, rewards and policy (JSON text).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gym_server.core import jsontext
from gym_server.store.export import UnknownExportFormat, require_pyarrow, stream_records
from gym_server.store.records import TrajectoryRecord, TrajectoryStatus
from gym_server.store.repository import TrajectoryFilter

__all__ = [
    "NothingToExport",
    "TrainingSet",
    "export_training_set",
    "preference_rows",
    "sft_rows",
]

TrainingSet = Literal["sft", "preference"]
Row = dict[str, Any]


class NothingToExport(ValueError):
    """No stored episode (SFT) or pair (preference) met the threshold: nothing was written."""


def _usable(record: TrajectoryRecord) -> bool:
    return (
        record.status is TrajectoryStatus.COMPLETED and record.failure is None and record.reward is not None
    )


def _trimmed(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The transcript up to and including its last assistant message."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "assistant":
            return messages[: index + 1]
    return []


def _opening(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every message before the first assistant turn: what the policy was given."""
    for index, message in enumerate(messages):
        if message.get("role") == "assistant":
            return messages[:index]
    return messages


def _rank(record: TrajectoryRecord) -> tuple[float, int, str, str]:
    """Larger is better: reward, then fewer turns, then newer, then id (a total order)."""
    return (record.reward or 0.0, -record.num_turns, record.created_at.isoformat(), record.id)


def _policy(record: TrajectoryRecord) -> str | None:
    return None if record.policy is None else json.dumps(record.policy, sort_keys=True)


def _tools(record: TrajectoryRecord) -> str:
    return json.dumps(record.tools)


def sft_rows(records: Iterable[TrajectoryRecord], min_reward: float) -> list[Row]:
    """One SFT row per (env, task): its best usable episode with a reward of at least `min_reward`."""
    best: dict[tuple[str, str], TrajectoryRecord] = {}
    for record in records:
        if not _usable(record) or (record.reward or 0.0) < min_reward or not _trimmed(record.messages):
            continue
        key = (record.env, record.task_id)
        if key not in best or _rank(record) > _rank(best[key]):
            best[key] = record
    return [
        {
            "messages": _trimmed(record.messages),
            "tools": _tools(record),
            "trajectory_id": record.id,
            "run": record.run,
            "env": record.env,
            "env_version": record.env_version,
            "task_id": record.task_id,
            "seed": record.seed,
            "reward": record.reward,
            "policy": _policy(record),
        }
        for _key, record in sorted(best.items(), key=lambda item: item[0])
    ]


@dataclass(slots=True)
class _Group:
    best: TrajectoryRecord
    worst: TrajectoryRecord


def preference_rows(records: Iterable[TrajectoryRecord], min_margin: float) -> list[Row]:
    """One preference row per group of same-task episodes whose best and worst rewards differ by at
    least `min_margin` (see the module docstring for the grouping)."""
    groups: dict[tuple[str, str, str, str], _Group] = {}
    for record in records:
        if not _usable(record) or not _trimmed(record.messages):
            continue
        opening = _opening(record.messages)
        key = (record.env, record.task_id, json.dumps(opening, sort_keys=True), _tools(record))
        group = groups.get(key)
        if group is None:
            groups[key] = _Group(best=record, worst=record)
            continue
        if _rank(record) > _rank(group.best):
            group.best = record
        if (record.reward or 0.0, record.id) < (group.worst.reward or 0.0, group.worst.id):
            group.worst = record
    rows = []
    for key, group in sorted(groups.items(), key=lambda item: item[0]):
        chosen, rejected = group.best, group.worst
        if chosen.id == rejected.id or (chosen.reward or 0.0) - (rejected.reward or 0.0) < min_margin:
            continue  # a group of one episode has no pair, whatever the margin
        prompt = _opening(chosen.messages)
        rows.append(
            {
                "prompt": prompt,
                "chosen": _trimmed(chosen.messages)[len(prompt) :],
                "rejected": _trimmed(rejected.messages)[len(prompt) :],
                "tools": key[3],
                "chosen_id": chosen.id,
                "rejected_id": rejected.id,
                "chosen_run": chosen.run,
                "rejected_run": rejected.run,
                "env": chosen.env,
                "env_version": chosen.env_version,
                "task_id": chosen.task_id,
                "chosen_seed": chosen.seed,
                "rejected_seed": rejected.seed,
                "chosen_reward": chosen.reward,
                "rejected_reward": rejected.reward,
                "chosen_policy": _policy(chosen),
                "rejected_policy": _policy(rejected),
            }
        )
    return rows


def _write_jsonl(rows: list[Row], path: Path) -> None:
    with path.open("wb") as out:
        for row in rows:
            out.write(jsontext.dumps(row) + b"\n")


def _write_parquet(rows: list[Row], path: Path) -> None:
    pa = require_pyarrow()
    # Conversations stay nested (TRL reads `messages` as lists of dicts); Arrow infers one struct type
    # over every row's messages, a key missing from one message reading back as None.
    pa.parquet.write_table(pa.Table.from_pylist(rows), path, compression="zstd")


def export_training_set(
    url: str,
    out_path: str | Path,
    kind: TrainingSet,
    fmt: Literal["jsonl", "parquet"],
    *,
    min_reward: float = 1.0,
    min_margin: float = 0.5,
    where: TrajectoryFilter | None = None,
) -> int:
    """Write the SFT or preference set made from the trajectories `where` keeps; returns the row count.

    Args:
        url: the store's database URL.
        out_path: the file to create (overwritten); its folder is created. Nothing is written when
            there is no row.
        kind: `sft` or `preference`.
        fmt: `jsonl` or `parquet`.
        min_reward: SFT: the lowest reward a demonstration may have.
        min_margin: preference: the smallest reward gap between chosen and rejected.
        where: which trajectories to read (run, env, task, tenant, policy...).

    Raises:
        NothingToExport: no episode or pair met the threshold.
        UnknownExportFormat: `fmt` is neither format, or `kind` is unknown.
        MissingExtra: Parquet was asked for and pyarrow is not installed.
    """
    writers: dict[str, Callable[[list[Row], Path], None]] = {"jsonl": _write_jsonl, "parquet": _write_parquet}
    if fmt not in writers:
        raise UnknownExportFormat(f"a training set is written as jsonl or parquet, not {fmt!r}")
    if kind not in ("sft", "preference"):
        raise UnknownExportFormat(f"unknown training set {kind!r}; use sft or preference")
    if fmt == "parquet":
        require_pyarrow()  # fail before reading the store
    with stream_records(url, where or TrajectoryFilter()) as records:
        rows = sft_rows(records, min_reward) if kind == "sft" else preference_rows(records, min_margin)
    if not rows:
        raise NothingToExport(_nothing_message(kind, min_reward, min_margin))
    path = Path(out_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    writers[fmt](rows, path)
    return len(rows)


def _nothing_message(kind: TrainingSet, min_reward: float, min_margin: float) -> str:
    if kind == "sft":
        return (
            f"no completed trajectory without a failure has a reward of at least {min_reward:g} "
            "in the selection; nothing was written (lower --min-reward or check --run/--env)"
        )
    return (
        f"no two completed trajectories of one task (same opening and tools) differ in reward by at "
        f"least {min_margin:g} in the selection; nothing was written (lower --min-margin or check "
        "--run/--env)"
    )
