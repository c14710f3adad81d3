"""NeMo Gym's `/aggregate_metrics`: the statistics its base resources server computes over verify answers.

NeMo Gym's rollout collection posts every run's verify answers (stripped of `response` but its `usage`)
to each agent's `/aggregate_metrics`, and its `SimpleAgent` proxies that to the resources server, so a
resources server that does not serve the route fails the collection after the rollouts. The base
server (`SimpleResourcesServer.aggregate_metrics`, nemo-gym 0.4.0, unchanged at 07d6b0d) answers
`compute_aggregate_metrics` with the default hooks: NeMo Gym's `RewardProfiler` statistics (`mean`,
`max`, `min`, `median`, `std` of every numeric field, bools as 0/1, `response.usage` counted in) per
task (`_ng_task_index`) and over all answers, and the `mean/*` ones as key metrics. The same is computed
here without pandas, so the answer is theirs: keys, grouping, the NaN-dropping and the rule that when no
column of a group has a standard deviation, the columns that are never missing get 0.

Two departures, both where NeMo Gym would answer 500: two answers with the same task and rollout index,
or an index that is not an integer, are refused (the caller turns `ValueError` into a 422).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Any, Final

__all__ = ["ROLLOUT_INDEX", "TASK_INDEX", "aggregate_metrics"]

# NeMo Gym's row keys (`nemo_gym.global_config`): which task and which rollout of it an answer is.
TASK_INDEX: Final = "_ng_task_index"
ROLLOUT_INDEX: Final = "_ng_rollout_index"

_STATS: Final = ("mean", "max", "min", "median", "std")
# RewardProfiler groups by this temporary column (a numeric field of that name is not counted).
_AGENT_COLUMN: Final = "agent_name"

Number = int | float


def aggregate_metrics(verify_responses: list[dict[str, Any]]) -> dict[str, Any]:
    """NeMo Gym's `AggregateMetrics` (`group_level_metrics`, `agent_metrics`, `key_metrics`) of the
    verify answers, as its base resources server computes them.

    Raises:
        ValueError: an index that is not an integer, or two answers with the same pair of indexes.
    """
    if not verify_responses:
        return {"group_level_metrics": [], "agent_metrics": {}, "key_metrics": {}}
    records: list[dict[str, Number]] = []
    infos: dict[int, list[dict[str, Any]]] = defaultdict(list)
    seen: set[tuple[int, int]] = set()
    for answer in verify_responses:
        task, rollout = _index(answer, TASK_INDEX), _index(answer, ROLLOUT_INDEX)
        if (task, rollout) in seen:
            raise ValueError(f"two verify responses have {TASK_INDEX}={task} and {ROLLOUT_INDEX}={rollout}")
        seen.add((task, rollout))
        usage = _usage(answer)
        infos[task].append(_rollout_info(answer, task, rollout, usage))
        record: dict[str, Number] = {TASK_INDEX: task, ROLLOUT_INDEX: rollout}
        record.update(_numeric({**answer, **usage}))
        records.append(record)
    columns = _columns(records)
    groups: dict[int, list[dict[str, Number]]] = defaultdict(list)
    for record in records:
        groups[int(record[TASK_INDEX])].append(record)
    group_level = []
    for task in sorted(groups):
        rollouts = sorted(infos[task], key=lambda info: info[ROLLOUT_INDEX])
        group_level.append(
            {
                TASK_INDEX: task,
                **_describe(groups[task], columns),
                "sample": {"agent_ref": {"name": "agent"}},  # the row `compute_aggregate_metrics` makes
                "num_rollouts": len(rollouts),
                "expected_num_rollouts": len(rollouts),
                "missing_num_rollouts": 0,
                "reward_profile_completion_pct": 100.0,
                "rollout_infos": rollouts,
            }
        )
    agent_metrics = _describe(records, columns)
    key_metrics = {key: value for key, value in agent_metrics.items() if key.startswith("mean/")}
    return {"group_level_metrics": group_level, "agent_metrics": agent_metrics, "key_metrics": key_metrics}


def _index(answer: dict[str, Any], key: str) -> int:
    value = answer.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key} must be an integer, got {type(value).__name__}")
    return value


def _usage(answer: dict[str, Any]) -> dict[str, Any]:
    """`response.usage` of an answer (what the collection keeps of `response`), or nothing."""
    response = answer.get("response")
    usage = response.get("usage") if isinstance(response, dict) else None
    return usage if isinstance(usage, dict) else {}


def _numeric(fields: dict[str, Any]) -> dict[str, Number]:
    """The fields RewardProfiler counts: numbers, and bools as 0/1."""
    numbers: dict[str, Number] = {}
    for key, value in fields.items():
        if isinstance(value, bool):
            numbers[key] = int(value)
        elif isinstance(value, int | float) and key != _AGENT_COLUMN:
            numbers[key] = value
    return numbers


def _rollout_info(answer: dict[str, Any], task: int, rollout: int, usage: dict[str, Any]) -> dict[str, Any]:
    """RewardProfiler's `rollout_info_from_result`: the rollout's ids, its reward, its numeric fields."""
    info: dict[str, Any] = {"rollout_id": f"{task}:{rollout}", TASK_INDEX: task, ROLLOUT_INDEX: rollout}
    if "reward" in answer:
        info["reward"] = answer["reward"]
    info.update(_numeric(usage))
    rest = {k: v for k, v in answer.items() if k not in (TASK_INDEX, ROLLOUT_INDEX, "reward", "response")}
    info.update(_numeric(rest))
    return info


def _columns(records: list[dict[str, Number]]) -> list[str]:
    """Every statistic's column (the index columns are the grouping's), in order of first appearance."""
    columns: dict[str, None] = {}
    for record in records:
        columns.update(dict.fromkeys(record))
    return [column for column in columns if column not in (TASK_INDEX, ROLLOUT_INDEX)]


def _describe(records: list[dict[str, Number]], columns: list[str]) -> dict[str, Number]:
    """RewardProfiler's `describe_dataframe` of one group, flattened to `stat/column` without NaNs."""
    stats: dict[str, dict[str, Number]] = {stat: {} for stat in _STATS}
    complete: list[str] = []
    for column in columns:
        values = [record[column] for record in records if column in record]
        if len(values) == len(records):
            complete.append(column)
        if not values:
            continue
        stats["mean"][column] = math.fsum(values) / len(values)
        stats["max"][column] = max(values)
        stats["min"][column] = min(values)
        stats["median"][column] = float(statistics.median(values))
        if len(values) > 1:
            stats["std"][column] = statistics.stdev(float(value) for value in values)
    if not stats["std"]:  # no column has a deviation: pandas' NaN reads as 0 where nothing is missing
        stats["std"] = {column: 0.0 for column in complete}
    return {f"{stat}/{column}": value for stat in _STATS for column, value in stats[stat].items()}
