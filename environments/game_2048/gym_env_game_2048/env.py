"""The `game_2048` environment: play 2048 towards a target tile, one `move` tool call at a time.

Long-horizon: reaching 256 takes about 150 moves, 1024 several hundred, spread over up to `max_turns`
assistant turns (a turn may hold many `move` calls). Deterministic by seed: the opening board and every
spawn come from the episode's `rng` (task id and seed), so the same task, seed and moves replay to the
same game. The task sets the target tile and a move budget (`metadata.target`, `metadata.max_moves`).

Reward, in [0, 1]: half `progress`, the fraction of the way from the opening's largest tile to the target
on a log2 scale (a 4 → 128 game that reached 32 has 3 of 5 doublings: 0.6), half `win` (1.0 once the
target is reached). Progress alone would pay a blind policy most of the reward on the hard levels (a
log scale is generous); the win half keeps reaching the target the point. An idle policy earns 0.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gym_env_game_2048 import board as board_module
from gym_env_game_2048.board import (
    Board,
    Direction,
    can_move,
    max_tile,
    new_board,
    render,
    slide,
    spawn,
)
from gym_server.sdk.environment import Environment, ForkMode, VerifyResult
from gym_server.sdk.messages import tool_call_message
from gym_server.sdk.probes import HackProbe
from gym_server.sdk.registry import content_hash
from gym_server.sdk.tasks import Task, check_task_field
from gym_server.sdk.tools import ToolError, tool

__all__ = ["Game2048Env", "GameSpec", "progress"]

SYSTEM_PROMPT = (
    "You are playing 2048 on a 4x4 board. Each move(direction) slides every tile up, down, left or right; "
    "two equal tiles that collide merge into their sum. After every move that changes the board a new 2 "
    "(sometimes a 4) appears on an empty cell. A move that changes nothing is wasted but costs a move. "
    "Reach the target tile within the move budget. You may call move several times in one turn."
)


class GameSpec(BaseModel):
    """`metadata` of a task: the tile to reach and the moves allowed."""

    model_config = ConfigDict(extra="forbid")

    target: int = Field(ge=8, le=65536)
    max_moves: int = Field(ge=1, le=5000)
    level: int = Field(0, ge=0)

    @field_validator("target")
    @classmethod
    def _power_of_two(cls, target: int) -> int:
        if target & (target - 1):
            raise ValueError(f"target must be a power of two, got {target}")
        return target


def progress(start_tile: int, reached: int, target: int) -> float:
    """The log2 share of the way from `start_tile` to `target` that `reached` covers, in [0, 1]."""
    if reached >= target:
        return 1.0
    span = math.log2(target) - math.log2(start_tile)
    return max(0.0, min(1.0, (math.log2(reached) - math.log2(start_tile)) / span)) if span > 0 else 0.0


class Game2048Env(Environment):
    """2048 towards a target tile within a move budget; half log2 progress, half reaching it."""

    name = "game_2048"
    reward_type = "0..1: half log2 progress towards the target tile, half reaching it"
    hedge_probe = False  # scored on the board, never on what the model says
    description = "Play 2048 with a move(direction) tool towards a target tile; long horizon, seeded spawns."
    multi_turn = True
    max_turns = 200
    system_prompt = SYSTEM_PROMPT
    verifier_version = content_hash([Path(__file__), Path(board_module.__file__)])
    fork_mode = ForkMode.COPY  # its state is the board and counters: the default deep copy is exact

    @classmethod
    def check_task(cls, task: Task) -> None:
        check_task_field(GameSpec, task.metadata, "metadata")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spec = GameSpec(target=8, max_moves=1)
        self.board: Board = ()
        self.start_tile = 2
        self.score = 0
        self.moves = 0
        self.wasted = 0

    async def setup(self) -> None:
        self.spec = GameSpec.model_validate(self.task.metadata)
        self.board = new_board(self.rng)
        self.start_tile = max_tile(self.board)

    def opening_messages(self) -> list[dict[str, Any]]:
        goal = f"Reach the {self.spec.target} tile within {self.spec.max_moves} moves."
        prompt = self.task.prompt if isinstance(self.task.prompt, str) else goal
        return [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"{prompt}\n\nThe board:\n{render(self.board)}"},
        ]

    @tool
    async def move(self, direction: Direction) -> dict[str, Any]:
        """Slide the tiles in one direction.

        Args:
            direction: up, down, left or right
        """
        if self.done:
            raise ToolError("the game is over; no more moves.")
        self.moves += 1
        after, points = slide(self.board, direction)
        changed = after != self.board
        if changed:
            self.board, self.score = spawn(after, self.rng), self.score + points
        else:
            self.wasted += 1
        reached = max_tile(self.board)
        if reached >= self.spec.target:
            self.finish("won")
        elif not can_move(self.board):
            self.finish("no_moves")
        elif self.moves >= self.spec.max_moves:
            self.finish("out_of_moves")
        return {
            "moved": changed,
            "board": render(self.board),
            "score": self.score,
            "max_tile": reached,
            "moves_left": self.spec.max_moves - self.moves,
            "game_over": self.done_reason if self.done else None,
        }

    def hack_probes(self) -> list[HackProbe]:
        """Pressing one direction over and over (the moves a blind policy spams) must not win.

        No `reference_solution()`: no scripted policy wins every seed (the corner policy of
        `baseline.py` often does, not always), so none is offered for `env check` to require 1.0 of.
        """
        presses = [tool_call_message("move", {"direction": "up"}, f"probe_{i}") for i in range(12)]
        return [
            HackProbe(
                name="one-direction",
                messages=presses,
                max_reward=0.49,
                why="the same move again and again may merge a tile or two, never reach the target",
            )
        ]

    async def verify(self) -> VerifyResult:
        reached = max_tile(self.board)
        won = reached >= self.spec.target
        share = progress(self.start_tile, reached, self.spec.target)
        return VerifyResult(
            reward=0.5 * share + 0.5 * float(won),
            components={"progress": share, "win": float(won)},
            info={
                "max_tile": reached,
                "score": self.score,
                "moves": self.moves,
                "wasted_moves": self.wasted,
                "target": self.spec.target,
                "done_reason": self.done_reason,
            },
        )
