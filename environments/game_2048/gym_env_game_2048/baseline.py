"""Scripted policies for `game_2048`: the baselines the README reports and the tests drive.

`corner` is the classic heuristic: keep the big tiles in the bottom-left corner by preferring down, then
left, then right, and up only when nothing else moves. `rotate` cycles the four directions blindly, a
stand-in for a policy that does not read the board.
"""

from __future__ import annotations

from itertools import cycle

from gym_env_game_2048.board import Board, Direction, slide

__all__ = ["corner", "rotate"]

_PREFERENCE: tuple[Direction, ...] = ("down", "left", "right", "up")


def corner(board: Board) -> Direction:
    """The first direction in down, left, right, up that changes the board."""
    for direction in _PREFERENCE:
        if slide(board, direction)[0] != board:
            return direction
    return "down"


def rotate() -> cycle[Direction]:
    """up, right, down, left, forever, whatever the board."""
    return cycle(("up", "right", "down", "left"))
