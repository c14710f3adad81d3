"""Write the `game_2048` dataset (`datasets/gym_datasets/game_2048/{train,validation}.jsonl`).

A task is a curriculum level: a target tile and a move budget (about twice the moves a good player
needs). The episode's seed draws the opening board and the spawns, so one task gives a new game per
seed. The output is fixed (no randomness here); a test holds the checked-in files to a rerun.

    python -m gym_env_game_2048.generate
"""

from __future__ import annotations

from pathlib import Path

from gym_env_game_2048.env import GameSpec
from gym_server.sdk.tasks import DATASETS_ROOT, Task, holdout_split, write_dataset

__all__ = ["LEVELS", "TASKS_PER_LEVEL", "VALIDATION_EVERY", "build_tasks", "write"]

LEVELS: tuple[tuple[int, int], ...] = ((32, 60), (64, 120), (128, 220), (256, 400), (512, 800), (1024, 1600))
"""(target tile, move budget) per level, easiest first."""
TASKS_PER_LEVEL = 20
VALIDATION_EVERY = 5


def build_tasks() -> list[Task]:
    tasks = []
    for level, (target, budget) in enumerate(LEVELS):
        for copy in range(TASKS_PER_LEVEL):
            spec = GameSpec(target=target, max_moves=budget, level=level)
            tasks.append(
                Task(
                    id=f"game_2048-{level}-{copy:03d}",
                    prompt=f"Reach the {target} tile within {budget} moves.",
                    answer=None,
                    metadata=spec.model_dump(mode="json"),
                )
            )
    return tasks


def write(root: Path = DATASETS_ROOT) -> dict[str, int]:
    """Write both splits under `root/game_2048/` and return their sizes."""
    return write_dataset(root / "game_2048", holdout_split(build_tasks(), VALIDATION_EVERY))


if __name__ == "__main__":
    print(write())
