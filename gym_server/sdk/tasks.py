"""Tasks and the JSONL datasets they live in.

A dataset is a folder `datasets/gym_datasets/<name>/` holding one `<split>.jsonl` file per split (`train`,
`validation`, ...), one task object a line. A task's `answer` is what the verifier needs and the model
must not see: it is never served by the catalog.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

import gym_datasets
from gym_server.core.errors import EnvironmentDefinitionError
from gym_server.store.records import NAME_MAX_CHARS

__all__ = [
    "DATASETS_ROOT",
    "Dataset",
    "Task",
    "TaskFieldError",
    "check_task_field",
    "field_errors",
    "holdout_split",
    "render_jsonl",
    "write_dataset",
]

DATASETS_ROOT = gym_datasets.ROOT


class Task(BaseModel):
    """One problem: the prompt the model sees, the hidden answer the verifier uses, public metadata."""

    model_config = ConfigDict(extra="forbid")

    # Control characters are refused: ids are path segments and plain-text database columns.
    id: str = Field(min_length=1, max_length=NAME_MAX_CHARS, pattern=r"^[^\x00-\x1f\x7f]+$")
    prompt: str | list[dict[str, Any]] = Field(
        description="the user's request, or the full opening messages of the episode"
    )
    answer: Any = Field(
        None, description="hidden from the model and the catalog; the verifier's ground truth"
    )
    metadata: dict[str, Any] = Field(default_factory=dict)

    def public(self) -> dict[str, Any]:
        """The task as the catalog shows it: no answer."""
        return {"id": self.id, "prompt": self.prompt, "metadata": self.metadata}


class TaskFieldError(ValueError):
    """A task's field is not what its environment needs; `errors` are (dotted path in the task, problem)."""

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{path}: {problem}" for path, problem in errors))
        self.errors = errors


def field_errors(exc: ValidationError, prefix: str = "") -> list[tuple[str, str]]:
    """A validation error as (dotted path, message) pairs, the input never echoed (it may be megabytes)."""
    pairs = []
    for error in exc.errors(include_input=False, include_url=False):
        path = ".".join(str(part) for part in (prefix, *error["loc"]) if part != "")
        pairs.append((path or prefix, str(error["msg"])))
    return pairs


def check_task_field(schema: Any, value: Any, field: str) -> Any:
    """Validate one field of a task (`answer`, `metadata.world`) against a type or pydantic model.

    Environments call it from `check_task`, so a refused inline task names the field that is wrong.

    Raises:
        TaskFieldError: the value does not validate; the paths start with `field`.
    """
    try:
        return _adapter(schema).validate_python(value)
    except ValidationError as exc:
        raise TaskFieldError(field_errors(exc, field)) from None


@cache
def _adapter(schema: Any) -> TypeAdapter[Any]:
    return TypeAdapter(schema)


class Dataset:
    """The splits of one dataset folder, loaded lazily and indexed by task id.

    Thread-safe: first use happens in worker threads (the server never loads data on its event loop), and
    two requests may be first at once; one loads, the other waits for it.
    """

    def __init__(self, name: str, root: Path = DATASETS_ROOT) -> None:
        self.name = name
        self.folder = root / name
        self._splits: dict[str, list[Task]] | None = None
        self._by_id: dict[str, Task] = {}
        self._loading = threading.Lock()

    def __repr__(self) -> str:
        return f"Dataset({self.name!r}, folder={str(self.folder)!r})"

    @property
    def splits(self) -> dict[str, list[Task]]:
        if self._splits is None:
            with self._loading:
                if self._splits is None:
                    self._splits = self._load()
        return self._splits

    def split_sizes(self) -> dict[str, int]:
        return {split: len(tasks) for split, tasks in self.splits.items()}

    def tasks(self, split: str | None = None) -> list[Task]:
        """All tasks of a split, or of every split in file-name order when `split` is None."""
        if split is None:
            return [task for tasks in self.splits.values() for task in tasks]
        return self.splits.get(split, [])

    def get(self, task_id: str) -> Task | None:
        self.splits  # noqa: B018 - loads the index on first use
        return self._by_id.get(task_id)

    def task_at(self, split: str, index: int) -> Task:
        """Task `index` of `split` (a generated dataset makes just that one)."""
        return self.tasks(split)[index]

    def task_range(self, split: str, start: int, stop: int) -> list[Task]:
        """Tasks `start` up to `stop` of `split` (a page of the catalog).

        One call a page, so a generated dataset can serve the page from a cache of its own, or make its
        missing tasks together (in parallel), instead of one `task_at` at a time.
        """
        return self.tasks(split)[max(0, start) : max(0, stop)]

    def indexed(self, task_id: str) -> Task | None:
        """What `get(task_id)` answers when that is a lookup in an index already in memory, else None.

        Safe on the event loop (no file read, no generation), so a create naming a known task of a
        loaded dataset skips the worker thread; None sends the caller to `get` in a thread. A subclass
        with its own `get` (a generated dataset) always answers None.
        """
        if self._splits is None or type(self).get is not Dataset.get:
            return None
        return self._by_id.get(task_id)

    def files(self) -> list[Path]:
        return sorted(self.folder.glob("*.jsonl")) if self.folder.is_dir() else []

    def _load(self) -> dict[str, list[Task]]:
        """Every split, indexing `_by_id` as it goes (under `_loading`, the only writer)."""
        splits: dict[str, list[Task]] = {}
        self._by_id.clear()  # a load that failed halfway left part of an index
        for path in self.files():
            tasks: list[Task] = []
            for number, line in enumerate(path.read_bytes().splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    task = Task.model_validate(orjson.loads(line))
                except (orjson.JSONDecodeError, ValidationError) as exc:
                    raise EnvironmentDefinitionError(f"{path}:{number}: not a valid task: {exc}") from exc
                if task.id in self._by_id:
                    raise EnvironmentDefinitionError(f"{path}:{number}: duplicate task id {task.id!r}")
                self._by_id[task.id] = task
                tasks.append(task)
            splits[path.stem] = tasks
        return splits


def holdout_split(tasks: Sequence[Task], every: int) -> dict[str, list[Task]]:
    """Split generated tasks: task `n` goes to validation when `n % every == every - 1`, else to train."""
    splits: dict[str, list[Task]] = {"train": [], "validation": []}
    for number, task in enumerate(tasks):
        splits["validation" if number % every == every - 1 else "train"].append(task)
    return splits


def render_jsonl(tasks: Iterable[Task]) -> bytes:
    """Tasks as JSONL, one object a line in model field order: byte-stable, so data files diff cleanly."""
    return b"".join(orjson.dumps(task.model_dump(mode="json")) + b"\n" for task in tasks)


def write_dataset(folder: Path, splits: Mapping[str, Sequence[Task]]) -> dict[str, int]:
    """Write one `<split>.jsonl` per split into `folder`; returns the split sizes."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, tasks in splits.items():
        (folder / f"{name}.jsonl").write_bytes(render_jsonl(tasks))
    return {name: len(tasks) for name, tasks in splits.items()}
