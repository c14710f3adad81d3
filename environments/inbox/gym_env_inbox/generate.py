"""Write the `inbox` dataset (`datasets/gym_datasets/inbox/{train,validation}.jsonl`): task seeds, questions,
answers.

Only the mailbox seed, family and size are stored per task; the env rebuilds the mailbox at reset from
them (`questions.build_episode`), and this script records the question, the accepted answers, the
planted wrong values and the gold message ids it produced. The output is a pure function of `SEED`: a
test holds the checked-in files to a rerun.

    python -m gym_env_inbox.generate
"""

from __future__ import annotations

from pathlib import Path
from random import Random

from gym_env_inbox.env import MailboxSpec
from gym_env_inbox.questions import FAMILIES, build_episode
from gym_env_inbox.scoring import InboxAnswer
from gym_server.sdk.tasks import DATASETS_ROOT, Task, holdout_split, write_dataset

__all__ = ["SEED", "SIZE", "TASK_COUNT", "VALIDATION_EVERY", "build_tasks", "write"]

SEED = 20241231
TASK_COUNT = 240
SIZE = 2000
VALIDATION_EVERY = 5
"""Every fifth task goes to validation (an 80/20 split); families are used round-robin."""


def build_tasks(seed: int = SEED, count: int = TASK_COUNT) -> list[Task]:
    rng = Random(seed)
    families = list(FAMILIES)
    tasks = []
    for number in range(count):
        spec = MailboxSpec(seed=rng.getrandbits(31), family=families[number % len(families)], size=SIZE)
        _, question = build_episode(spec.seed, spec.family, spec.size)
        answer = InboxAnswer(
            answers=list(question.answers),
            distractors=list(question.distractors),
            message_ids=list(question.message_ids),
        )
        tasks.append(
            Task(
                id=f"inbox-{number:05d}",
                prompt=question.prompt,
                answer=answer.model_dump(mode="json"),
                metadata={"mailbox": spec.model_dump(mode="json")},
            )
        )
    return tasks


def write(root: Path = DATASETS_ROOT) -> dict[str, int]:
    """Write both splits under `root/inbox/` and return their sizes."""
    return write_dataset(root / "inbox", holdout_split(build_tasks(), VALIDATION_EVERY))


if __name__ == "__main__":
    print(write())
