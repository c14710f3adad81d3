"""A disk cache of generated tasks, so a generator's task list is generated once per machine, not per listing.

Why: some of reasoning-gym's generators are slow (puzzle24 about 80 ms a task, 150 ms on a busy machine),
so listing a split of 1,000 tasks took over a minute, every time the server restarted, and loaders that
read a whole task list timed out. A task is a pure function of its id and the generator's code, so what
one listing generated can be kept and read back by the next (a chunk of 100 tasks parses in about a
millisecond).

Layout: `<root>/<generator>/<key>/<split>-<chunk:05d>.jsonl`, one task a line as `render_jsonl` writes it,
`CHUNK_SIZE` tasks a file (chunk `c` holds indices `c * CHUNK_SIZE` up to the next chunk). The key is a
hash of what decides the tasks: the generator, the curriculum level, the split, the dataset's full
configuration (its seed among it), reasoning-gym's version and this package's `env.py` (how an item
becomes a `Task`); so an upgrade or an edit writes new files beside the old ones instead of serving stale
tasks. The default root is `cache/reasoning_gym` in the gym's data folder (`$GYM_HOME`, see
`gym_server.core.settings.data_dir`); deleting it is always safe.

Only whole chunks are written, to a temporary name renamed into place, so a reader sees a complete chunk
or none. A chunk that does not parse, or holds the wrong ids, counts as missing and is generated again.
Nothing is kept in memory: a read parses the files a page needs. The cache is an optimisation: a folder
that cannot be written is logged once and the tasks are served uncached.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import orjson
from pydantic import ValidationError

from gym_server.core.settings import data_dir
from gym_server.sdk.tasks import Task, render_jsonl

__all__ = ["CHUNK_SIZE", "TaskCache", "cache_key"]

log = logging.getLogger(__name__)

CHUNK_SIZE = 100


def cache_key(*parts: object) -> str:
    """16 hex digits of a SHA-256 over the parts' JSON (dict keys sorted, so equal configs hash alike)."""
    document = orjson.dumps(list(parts), option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    return hashlib.sha256(document).hexdigest()[:16]


class TaskCache:
    """The chunk files of generated tasks under one root folder.

    Args:
        root: the folder; None resolves `data_dir() / "cache" / "reasoning_gym"` on each use, so setting
            `GYM_HOME` moves it.
    """

    def __init__(self, root: Path | None = None) -> None:
        self._root = root
        self._warned = False

    def __repr__(self) -> str:
        return f"TaskCache(root={str(self.root)!r})"

    @property
    def root(self) -> Path:
        return self._root if self._root is not None else data_dir() / "cache" / "reasoning_gym"

    def path(self, generator: str, key: str, split: str, chunk: int) -> Path:
        return self.root / generator / key / f"{split}-{chunk:05d}.jsonl"

    def read(self, generator: str, key: str, split: str, chunk: int, ids: Sequence[str]) -> list[Task] | None:
        """The chunk's tasks when its file exists and holds exactly `ids` in order, else None."""
        path = self.path(generator, key, split, chunk)
        try:
            lines = path.read_bytes().splitlines()
            tasks = [Task.model_validate(orjson.loads(line)) for line in lines if line.strip()]
        except FileNotFoundError:
            return None
        except (OSError, orjson.JSONDecodeError, ValidationError) as exc:
            log.warning("ignoring the unreadable task cache file %s: %s", path, exc)
            return None
        if [task.id for task in tasks] != list(ids):
            log.warning("ignoring the task cache file %s: it holds other tasks", path)
            return None
        return tasks

    def write(self, generator: str, key: str, split: str, chunk: int, tasks: Sequence[Task]) -> None:
        """Store one whole chunk atomically (a temporary file renamed into place)."""
        path = self.path(generator, key, split, chunk)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            try:
                with os.fdopen(handle, "wb") as file:
                    file.write(render_jsonl(tasks))
                os.replace(temporary, path)
            except BaseException:
                Path(temporary).unlink(missing_ok=True)
                raise
        except OSError as exc:
            if not self._warned:
                self._warned = True
                log.warning("generated tasks are not cached (%s): listing will generate them again", exc)
