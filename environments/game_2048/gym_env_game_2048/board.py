"""The rules of 2048, as pure functions of a board (a tuple of rows) and a seeded `Random`.

A move slides every tile as far as it goes in one direction and merges equal neighbours once per move
(the merged tile's value is added to the score); a move that changes nothing is not a move and spawns
nothing. After a real move one tile spawns on a random empty cell: a 2 nine times in ten, else a 4.
The game is over when no direction changes the board.
"""

from __future__ import annotations

from random import Random
from typing import Literal

__all__ = [
    "DIRECTIONS",
    "SIZE",
    "Board",
    "Direction",
    "can_move",
    "max_tile",
    "new_board",
    "render",
    "slide",
    "spawn",
]

SIZE = 4
Direction = Literal["up", "down", "left", "right"]
DIRECTIONS: tuple[Direction, ...] = ("up", "down", "left", "right")
Board = tuple[tuple[int, ...], ...]


def _merge_row(row: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    """Slide one row to the left; returns the new row and the points its merges scored."""
    tiles = [value for value in row if value]
    merged: list[int] = []
    points = 0
    index = 0
    while index < len(tiles):
        if index + 1 < len(tiles) and tiles[index] == tiles[index + 1]:
            merged.append(tiles[index] * 2)
            points += tiles[index] * 2
            index += 2
        else:
            merged.append(tiles[index])
            index += 1
    return tuple(merged + [0] * (len(row) - len(merged))), points


def _transpose(board: Board) -> Board:
    return tuple(zip(*board, strict=True))


def slide(board: Board, direction: Direction) -> tuple[Board, int]:
    """The board after sliding in `direction` (before any spawn) and the points scored."""
    rows = _transpose(board) if direction in ("up", "down") else board
    reverse = direction in ("right", "down")
    moved: list[tuple[int, ...]] = []
    points = 0
    for row in rows:
        line, gained = _merge_row(row[::-1] if reverse else row)
        moved.append(line[::-1] if reverse else line)
        points += gained
    result = tuple(moved)
    return (_transpose(result) if direction in ("up", "down") else result), points


def spawn(board: Board, rng: Random) -> Board:
    """Put a 2 (90 %) or a 4 on a random empty cell; the board unchanged when it is full."""
    empty = [(r, c) for r, row in enumerate(board) for c, value in enumerate(row) if not value]
    if not empty:
        return board
    row, column = rng.choice(empty)
    value = 4 if rng.random() < 0.1 else 2
    cells = [list(line) for line in board]
    cells[row][column] = value
    return tuple(tuple(line) for line in cells)


def new_board(rng: Random) -> Board:
    """An empty board with two spawned tiles."""
    board: Board = tuple((0,) * SIZE for _ in range(SIZE))
    return spawn(spawn(board, rng), rng)


def can_move(board: Board) -> bool:
    return any(slide(board, direction)[0] != board for direction in DIRECTIONS)


def max_tile(board: Board) -> int:
    return max(max(row) for row in board)


def render(board: Board) -> str:
    """Rows top to bottom, `.` for an empty cell, columns aligned."""
    return "\n".join(" ".join(f"{value or '.':>5}" for value in row) for row in board)
