"""SFT and preference sets from a store of known episodes: which episodes are picked, the rows' layout and
lineage, both file formats, and the refusal that writes nothing (through the CLI as it is wired)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import typer
from store.test_export import store_records
from store.training_episodes import (
    TOOLS,
    episode,
    known_episodes,
    opening,
    store_known_episodes,
    turns,
)
from typer.testing import CliRunner

from gym_server.cli import export
from gym_server.store.repository import TrajectoryFilter
from gym_server.store.training_sets import NothingToExport, export_training_set, preference_rows, sft_rows

cli = typer.Typer()
cli.command()(export.export)
cli.command("noop")(lambda: None)  # two commands, so `export` is invoked by name as in the real CLI


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, wide_terminal: None) -> CliRunner:
    monkeypatch.chdir(tmp_path)
    for name in ("GYM_DATABASE_URL", "GYM_STORE__URL", "GYM_STORE__PATH"):
        monkeypatch.delenv(name, raising=False)
    return CliRunner()


def test_sft_keeps_the_best_clean_episode_per_task_at_or_above_the_threshold() -> None:
    rows = sft_rows(known_episodes(), min_reward=1.0)
    # count-a: two 1.0 episodes from run r1 and one from r2; the fewest turns wins the tie.
    assert [(row["task_id"], row["trajectory_id"]) for row in rows] == [("count-a", "a-r2")]
    row = rows[0]
    assert row["messages"] == opening(3) + turns([3], "done: 3")[:-1]  # the closing note is dropped
    assert row["messages"][-1]["role"] == "assistant"
    assert json.loads(row["tools"]) == TOOLS
    assert (row["run"], row["env"], row["env_version"], row["seed"], row["reward"]) == (
        "r2",
        "counter",
        "v1",
        3,
        1.0,
    )
    assert json.loads(row["policy"]) == {"model": "other", "weight_version": 1}


def test_sft_of_one_run_and_a_lower_threshold() -> None:
    r1 = [record for record in known_episodes() if record.run == "r1"]
    assert [row["trajectory_id"] for row in sft_rows(r1, min_reward=1.0)] == ["a-other-seed"]
    # count-a's best is the 1-turn episode from another opening; count-b's is 0.5; count-c never counts.
    assert [row["trajectory_id"] for row in sft_rows(r1, min_reward=0.5)] == ["a-other-seed", "b-half"]


def test_preference_pairs_the_best_against_the_worst_of_one_opening() -> None:
    r1 = [record for record in known_episodes() if record.run == "r1"]
    rows = preference_rows(r1, min_margin=0.5)
    assert [(row["chosen_id"], row["rejected_id"]) for row in rows] == [("a-best", "a-wrong")]
    row = rows[0]
    assert row["prompt"] == opening(3)
    assert row["chosen"] == turns([2, 1], "done: 3")[:-1]
    assert row["rejected"] == turns([5], "done: 5")[:-1]
    assert (row["chosen_reward"], row["rejected_reward"], row["task_id"]) == (1.0, 0.0, "count-a")
    assert json.loads(row["tools"]) == TOOLS
    # a smaller margin admits count-b's pair (0.5 over 0.25)
    # a margin of 0 pairs every group of two or more (count-a's other opening has one episode: no pair)
    assert len(preference_rows(r1, min_margin=0.0)) == 2
    wider = preference_rows(r1, min_margin=0.25)
    assert [(row["chosen_id"], row["rejected_id"]) for row in wider] == [
        ("a-best", "a-wrong"),
        ("b-half", "b-quarter"),
    ]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_export_writes_both_sets_in_both_formats(store_url: str, tmp_path: Path, fmt: Any) -> None:
    store_known_episodes(store_url)
    where = TrajectoryFilter(run="r1")
    sft, pairs = tmp_path / f"sft.{fmt}", tmp_path / f"pairs.{fmt}"
    assert export_training_set(store_url, sft, "sft", fmt, min_reward=0.5, where=where) == 2
    assert export_training_set(store_url, pairs, "preference", fmt, min_margin=0.5, where=where) == 1
    read = _read_jsonl if fmt == "jsonl" else _read_parquet
    assert read(sft) == sft_rows([r for r in known_episodes() if r.run == "r1"], min_reward=0.5)
    assert read(pairs) == preference_rows([r for r in known_episodes() if r.run == "r1"], min_margin=0.5)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    """Arrow gives every message the union of all messages' keys; a key a message lacked reads as None."""

    def strip(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        cleaned = []
        for message in messages:
            kept = {key: value for key, value in message.items() if value is not None or key == "content"}
            if "tool_calls" in kept:
                kept["tool_calls"] = [
                    {k: v for k, v in call.items() if v is not None} for call in kept["tool_calls"]
                ]
            cleaned.append(kept)
        return cleaned

    rows: list[dict[str, Any]] = pq.read_table(path).to_pylist()
    for row in rows:
        for column in ("messages", "prompt", "chosen", "rejected"):
            if column in row:
                row[column] = strip(row[column])
    return rows


def test_cli_exports_an_sft_set_of_a_policy(runner: CliRunner, store_url: str, tmp_path: Path) -> None:
    store_known_episodes(store_url)
    out = tmp_path / "sets" / "sft.jsonl"
    args = ["export", str(out), "--kind", "sft", "--database-url", store_url, "--policy", "tiny"]
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert f"Exported 1 sft examples as jsonl to {out}" in result.stderr
    assert [row["trajectory_id"] for row in _read_jsonl(out)] == ["a-other-seed"]


def test_cli_leaves_evaluation_episodes_out_of_every_export_and_says_how_many(
    runner: CliRunner, store_url: str, tmp_path: Path
) -> None:
    """A held-out evaluation (metadata.purpose evaluation, as the demo's and `gym-server eval` store it)
    is not training data: `export` leaves it out, names the count, and keeps it on request."""
    records = known_episodes()
    held_out = episode("held-out", "count-z", 1.0, [3], run="r1-after", order=10)
    held_out.metadata = {"purpose": "evaluation"}
    tagged = episode("other-purpose", "count-y", 1.0, [3], order=11)
    tagged.metadata = {"purpose": "probe"}
    store_records(store_url, [*records, held_out, tagged])
    out = tmp_path / "sets" / "sft.jsonl"
    base = ["--database-url", store_url]

    result = runner.invoke(cli, ["export", str(out), "--kind", "sft", *base])
    assert result.exit_code == 0, result.output
    assert "left out 1 evaluation episodes" in result.stderr and "--include-evaluation" in result.stderr
    assert {row["task_id"] for row in _read_jsonl(out)} == {"count-a", "count-y"}

    result = runner.invoke(cli, ["export", str(out), "--kind", "sft", "--include-evaluation", *base])
    assert result.exit_code == 0, result.output
    assert "left out" not in result.stderr
    assert "count-z" in {row["task_id"] for row in _read_jsonl(out)}

    raw = tmp_path / "all.jsonl"
    result = runner.invoke(cli, ["export", str(raw), *base])
    assert result.exit_code == 0, result.output
    assert f"Exported {len(records) + 1} trajectories" in result.stderr
    assert "left out 1 evaluation episodes" in result.stderr
    assert "held-out" not in {row["id"] for row in _read_jsonl(raw)}


def test_cli_refuses_a_run_with_nothing_above_the_threshold(
    runner: CliRunner, store_url: str, tmp_path: Path
) -> None:
    store_known_episodes(store_url)
    out = tmp_path / "sets" / "sft.jsonl"
    args = [
        "export",
        str(out),
        "--kind",
        "sft",
        "--run",
        "r1",
        "--min-reward",
        "1.5",
        "--database-url",
        store_url,
    ]
    result = runner.invoke(cli, args)
    assert result.exit_code == 1
    assert "reward of at least 1.5" in result.stderr and "nothing was written" in result.stderr
    assert not out.exists() and not out.parent.exists()

    pairs = tmp_path / "pairs.parquet"
    args = ["export", str(pairs), "--kind", "preference", "--run", "r2", "--database-url", store_url]
    result = runner.invoke(cli, args)
    assert result.exit_code == 1
    assert "differ in reward by at least 0.5" in result.stderr
    assert not pairs.exists()


def test_cli_refuses_csv_and_limit_for_a_training_set(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gym.db'}"
    result = runner.invoke(cli, ["export", str(tmp_path / "x.csv"), "--kind", "sft", "--database-url", url])
    assert result.exit_code == 2
    assert "jsonl or parquet" in result.stderr
    assert not (tmp_path / "x.csv").exists()


def test_the_api_refuses_nothing_quietly(store_url: str, tmp_path: Path) -> None:
    with pytest.raises(NothingToExport, match="no completed trajectory"):
        export_training_set(store_url, tmp_path / "empty.jsonl", "sft", "jsonl")
    assert not (tmp_path / "empty.jsonl").exists()
