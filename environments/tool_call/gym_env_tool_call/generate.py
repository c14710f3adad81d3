"""Write the `tool_call` dataset (`datasets/gym_datasets/tool_call/{train,validation}.jsonl`) from the
templates.

The output is a pure function of `SEED`: rerunning the script rewrites byte-identical files, and a test
holds the checked-in files to that. Templates are used round-robin so every intent (and so every tool
family) appears in both splits; a draft whose wording repeats an earlier task is drawn again. Each task
offers its family's tools plus two or three distractors from other families, in shuffled order.

Run it from the repository root:

    python -m gym_env_tool_call.generate
"""

from __future__ import annotations

from pathlib import Path
from random import Random

from gym_env_tool_call.catalog import FAMILIES, TOOLS
from gym_env_tool_call.draft import Draft, Intent
from gym_env_tool_call.intents_personal import PERSONAL_INTENTS
from gym_env_tool_call.intents_world import WORLD_INTENTS
from gym_server.sdk.tasks import DATASETS_ROOT, Task, holdout_split, write_dataset

__all__ = ["INTENTS", "SEED", "TASK_COUNT", "VALIDATION_EVERY", "build_tasks", "write"]

SEED = 20250301
TASK_COUNT = 250
VALIDATION_EVERY = 5
"""Task number `n` goes to validation when `n % VALIDATION_EVERY == VALIDATION_EVERY - 1` (a 80/20 split)."""

INTENTS: tuple[Intent, ...] = PERSONAL_INTENTS + WORLD_INTENTS
_REDRAWS = 100


def build_tasks(seed: int = SEED, count: int = TASK_COUNT) -> list[Task]:
    """Every task, in id order."""
    rng = Random(seed)
    seen: set[str] = set()
    tasks: list[Task] = []
    for number in range(count):
        intent = INTENTS[number % len(INTENTS)]
        draft = intent(rng)
        for _ in range(_REDRAWS):
            if draft.prompt not in seen:
                break
            draft = intent(rng)
        else:
            raise RuntimeError(f"template {intent.__name__} ran out of distinct wordings")
        seen.add(draft.prompt)
        tasks.append(_task(number, intent, draft, rng))
    return tasks


def write(root: Path = DATASETS_ROOT) -> dict[str, int]:
    """Write both splits under `root/tool_call/` and return their sizes."""
    return write_dataset(root / "tool_call", holdout_split(build_tasks(), VALIDATION_EVERY))


def _task(number: int, intent: Intent, draft: Draft, rng: Random) -> Task:
    others = [tool for tool in TOOLS if tool.family != draft.family]
    offered = [*FAMILIES[draft.family], *rng.sample(others, rng.randint(2, 3))]
    rng.shuffle(offered)
    return Task(
        id=f"tool_call-{number:05d}",
        prompt=draft.prompt,
        answer={
            "calls": [expected.model_dump(exclude_defaults=True) for expected in draft.calls],
            "effects": {tool.name: tool.effect for tool in offered if tool.effect != "read"},
        },
        metadata={
            "family": draft.family,
            "intent": intent.__name__,
            "tools": [tool.schema() for tool in offered],
        },
    )


if __name__ == "__main__":
    print(write())
