"""Write the `sql_analyst` dataset (`datasets/gym_datasets/sql_analyst/{train,validation}.jsonl`).

Templates (`questions.py`) run round-robin within each family with parameters drawn from a seeded
`Random`; a draw whose gold query repeats an earlier task, or returns no rows or only NULLs, is redrawn,
so every task has a non-trivial answer. The output is a pure function of `SEED`; a test holds the
checked-in files to a rerun.

    python -m gym_env_sql_analyst.generate
"""

from __future__ import annotations

from pathlib import Path
from random import Random

from gym_env_sql_analyst.env import SqlAnswer
from gym_env_sql_analyst.questions import TEMPLATES
from gym_env_sql_analyst.results import run_gold
from gym_server.sdk.tasks import DATASETS_ROOT, Task, holdout_split, write_dataset

__all__ = ["PER_TEMPLATE", "SEED", "VALIDATION_EVERY", "build_tasks", "write"]

SEED = 20240601
PER_TEMPLATE = 8
"""Draws per template; templates without parameters give one task."""
VALIDATION_EVERY = 5
_REDRAWS = 40


def build_tasks(seed: int = SEED) -> list[Task]:
    rng = Random(seed)
    tasks: list[Task] = []
    seen: set[str] = set()
    for family, templates in TEMPLATES.items():
        for template in templates:
            for _ in range(PER_TEMPLATE):
                for _ in range(_REDRAWS):
                    question = template(rng)
                    if question.sql in seen:
                        continue
                    rows = run_gold(family, question.sql).rows
                    if rows and any(value is not None for row in rows for value in row):
                        break
                else:
                    break  # this template has no more distinct, non-empty questions
                seen.add(question.sql)
                answer = SqlAnswer(sql=question.sql, order_matters=question.order_matters)
                tasks.append(
                    Task(
                        id=f"sql_analyst-{len(tasks):04d}",
                        prompt=question.prompt,
                        answer=answer.model_dump(mode="json"),
                        metadata={"family": family, "template": template.__name__.lstrip("_")},
                    )
                )
    return tasks


def write(root: Path = DATASETS_ROOT) -> dict[str, int]:
    """Write both splits under `root/sql_analyst/` and return their sizes."""
    return write_dataset(root / "sql_analyst", holdout_split(build_tasks(), VALIDATION_EVERY))


if __name__ == "__main__":
    print(write())
