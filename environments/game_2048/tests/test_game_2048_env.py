"""The `game_2048` environment: the rules, golden transcripts, seeds, the scripted baselines, bad input."""

from __future__ import annotations

from pathlib import Path
from random import Random
from typing import Any

import orjson
import pytest

from gym_env_game_2048 import generate
from gym_env_game_2048.baseline import corner, rotate
from gym_env_game_2048.board import can_move, max_tile, new_board, slide
from gym_env_game_2048.env import Game2048Env, progress
from gym_server.sdk.messages import Message
from gym_server.sdk.registry import Registry
from gym_server.sdk.tasks import Task, holdout_split, render_jsonl

FIXTURES = Path(__file__).resolve().parent.parent / "gym_env_game_2048" / "fixtures" / "golden.jsonl"
GOLDEN = [orjson.loads(line) for line in FIXTURES.read_bytes().splitlines() if line.strip()]


def _move(direction: str) -> dict[str, Any]:
    arguments = orjson.dumps({"direction": direction}).decode()
    call = {"id": "call_1", "type": "function", "function": {"name": "move", "arguments": arguments}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


async def _env(task_id: str, seed: int = 0) -> Game2048Env:
    task = Game2048Env.dataset().get(task_id)
    assert task is not None
    env = Game2048Env(task, seed)
    await env.reset()
    return env


async def _play(task: Task, seed: int, policy: str) -> Game2048Env:
    env = Game2048Env(task, seed)
    await env.reset()
    blind = rotate()
    while not env.done:
        await env.step(_move(corner(env.board) if policy == "corner" else next(blind)))
    return env


def test_slide_merges_each_tile_once_and_scores_the_merges() -> None:
    board = ((2, 2, 2, 2), (4, 0, 4, 8), (0, 0, 0, 0), (2, 4, 8, 16))
    left, points = slide(board, "left")
    assert left == ((4, 4, 0, 0), (8, 8, 0, 0), (0, 0, 0, 0), (2, 4, 8, 16))
    assert points == 4 + 4 + 8
    assert slide(board, "right")[0][0] == (0, 0, 4, 4)
    assert slide(board, "up")[0][0] == (2, 2, 2, 2) and slide(board, "down")[0][3] == (2, 4, 8, 16)
    full = ((2, 4, 2, 4), (4, 2, 4, 2), (2, 4, 2, 4), (4, 2, 4, 2))
    assert not can_move(full) and can_move(board)


def test_progress_is_log2_share_and_one_at_the_target() -> None:
    assert progress(4, 32, 128) == pytest.approx(3 / 5)
    assert progress(2, 2, 64) == 0.0 and progress(4, 256, 128) == 1.0


@pytest.mark.parametrize("case", GOLDEN, ids=[case["name"] for case in GOLDEN])
async def test_golden_fixtures_replay_to_their_reward(case: dict[str, Any]) -> None:
    env = await _env(case["task_id"], case["seed"])
    for message in case["messages"]:
        if env.done:
            break
        await env.step(Message.model_validate(message).to_dict())
    result = await env.verify()
    assert result.reward == pytest.approx(case["expected_reward"])
    assert result.components == pytest.approx(case["expected_components"])


def test_golden_fixtures_cover_full_zero_malformed_and_spam() -> None:
    by_name = {case["name"]: case["expected_reward"] for case in GOLDEN}
    assert by_name["full_score_corner_policy_reaches_32"] == 1.0
    assert by_name["zero_score_prose_at_once"] == 0.0
    assert by_name["malformed_calls_then_prose"] == 0.0
    assert by_name["spam_one_direction"] == 0.0
    assert 0.0 < by_name["partial_progress_then_stop"] < 0.5


async def test_same_task_and_seed_replay_the_same_game_and_another_seed_does_not() -> None:
    task = Game2048Env.dataset().get("game_2048-2-000")
    assert task is not None
    first, second, other = [await _play(task, seed, "corner") for seed in (3, 3, 4)]
    assert first.messages == second.messages and first.board == second.board
    assert first.messages[:2] != other.messages[:2]
    assert (await first.verify()) == (await second.verify())
    assert new_board(Random(1)) == new_board(Random(1))


async def test_corner_baseline_beats_the_blind_one_and_rewards_spread() -> None:
    """The scripted baselines the README reports, on a slice of the validation split (seed 0)."""
    tasks = Game2048Env.dataset().tasks("validation")[::2]
    corner_rewards = [(await (await _play(task, 0, "corner")).verify()).reward for task in tasks]
    blind_rewards = [(await (await _play(task, 0, "rotate")).verify()).reward for task in tasks]
    assert sum(corner_rewards) > sum(blind_rewards)
    assert min(corner_rewards) < 0.5 < max(corner_rewards) == 1.0  # signal: neither all 0 nor all 1


async def test_game_over_and_budget_end_the_episode() -> None:
    env = await _env("game_2048-0-000")
    env.spec = env.spec.model_copy(update={"max_moves": 3})
    for _ in range(3):
        await env.step(_move(corner(env.board)))
    assert env.done and env.done_reason == "out_of_moves"
    stuck = await _env("game_2048-0-000")
    stuck.spec = stuck.spec.model_copy(update={"target": 1024})
    stuck.board = ((2, 4, 2, 4), (4, 2, 4, 2), (8, 4, 2, 4), (16, 32, 64, 0))
    await stuck.step(_move("right"))  # whatever spawns in the corner, nothing can move after
    assert stuck.done and stuck.done_reason == "no_moves" and max_tile(stuck.board) == 64


async def test_bad_input_is_a_tool_error_not_a_crash() -> None:
    env = await _env("game_2048-0-000")
    for raw in ('{"direction": "diagonal"}', "[1]", '{"direction": "up", "extra": 1}', '{"direction": up'):
        call = {"id": "c", "type": "function", "function": {"name": "move", "arguments": raw}}
        outcome = await env.step({"role": "assistant", "content": None, "tool_calls": [call]})
        assert str(outcome.messages[0]["content"]).startswith("Error")
    assert env.moves == 0 and not env.done


def test_dataset_levels_splits_and_generator() -> None:
    assert Game2048Env.dataset().split_sizes() == {"train": 96, "validation": 24}
    levels = {task.metadata["level"] for task in Game2048Env.dataset().tasks("validation")}
    assert levels == set(range(len(generate.LEVELS)))
    for name, tasks in holdout_split(generate.build_tasks(), generate.VALIDATION_EVERY).items():
        assert (Game2048Env.dataset().folder / f"{name}.jsonl").read_bytes() == render_jsonl(tasks)
    assert "game_2048" in Registry([Game2048Env])
    with pytest.raises(ValueError, match="power of two"):
        Game2048Env.check_task(Task(id="t", prompt="p", metadata={"target": 100, "max_moves": 5}))
