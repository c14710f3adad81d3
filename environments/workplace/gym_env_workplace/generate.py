"""Write the `workplace` dataset (`datasets/gym_datasets/workplace/{train,validation}.jsonl`) from the
scenarios.

The output is a pure function of `SEED`: rerunning the script rewrites byte-identical files, and a test
holds the checked-in files to that. Scenarios are used round-robin so each appears in both splits; an
office week that cannot host a scenario (`Retry`) is redrawn.

Run it from the repository root:

    python -m gym_env_workplace.generate
"""

from __future__ import annotations

from pathlib import Path
from random import Random

from gym_env_workplace.goals import WorkplaceAnswer
from gym_env_workplace.office import Office, Retry
from gym_env_workplace.scenarios import SCENARIOS
from gym_env_workplace.world import WorldSpec
from gym_server.sdk.tasks import DATASETS_ROOT, Task, holdout_split, write_dataset

__all__ = ["SEED", "TASK_COUNT", "VALIDATION_EVERY", "build_tasks", "write"]

SEED = 20250310
TASK_COUNT = 140
VALIDATION_EVERY = 5
"""Task number `n` goes to validation when `n % VALIDATION_EVERY == VALIDATION_EVERY - 1` (a 80/20 split)."""
_REDRAWS = 50


def build_tasks(seed: int = SEED, count: int = TASK_COUNT) -> list[Task]:
    """Every task, in id order; each world and answer is validated against the environment's models."""
    rng = Random(seed)
    tasks: list[Task] = []
    for number in range(count):
        scenario = SCENARIOS[number % len(SCENARIOS)]
        for _ in range(_REDRAWS):
            office = Office.create(rng)
            try:
                prompt, goals = scenario(office)
            except Retry:
                continue
            break
        else:
            raise RuntimeError(f"scenario {scenario.__name__} failed {_REDRAWS} draws in a row")
        world = WorldSpec.model_validate(office.world()).model_dump(mode="json")
        answer = WorkplaceAnswer.model_validate({"goals": goals}).model_dump(mode="json")
        tasks.append(
            Task(
                id=f"workplace-{number:05d}",
                prompt=prompt,
                answer=answer,
                metadata={"scenario": scenario.__name__, "world": world},
            )
        )
    return tasks


def write(root: Path = DATASETS_ROOT) -> dict[str, int]:
    """Write both splits under `root/workplace/` and return their sizes."""
    return write_dataset(root / "workplace", holdout_split(build_tasks(), VALIDATION_EVERY))


if __name__ == "__main__":
    print(write())
