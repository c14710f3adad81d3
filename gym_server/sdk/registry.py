"""Finding environments: built-in and third-party alike, through the `gym_server.environments` entry points.

An entry point names either an `Environment` subclass or a zero-argument callable returning several
(how a family such as `reasoning_gym/<task>` registers). Each registered environment gets a version:
a content hash of its code folder and its dataset files, stored with every trajectory so a score can
always be traced to the exact environment that produced it.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import logging
import random
import re
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from importlib.metadata import entry_points
from pathlib import Path

from gym_server.core.errors import (
    EnvironmentDefinitionError,
    EnvironmentNotFound,
    SplitNotFound,
    TaskNotFound,
)
from gym_server.core.extras import MissingExtra
from gym_server.sdk.environment import Environment
from gym_server.sdk.tasks import Dataset, Task

__all__ = ["ENTRY_POINT_GROUP", "EnvironmentEntry", "Registry", "content_hash"]

ENTRY_POINT_GROUP = "gym_server.environments"
ENV_NAME = re.compile(r"^[a-z0-9][a-z0-9_\-.]*(/[a-z0-9][a-z0-9_\-.]*)?$")
_HASHED_SUFFIXES = {".py", ".jsonl", ".json", ".md", ".txt", ".csv", ".yaml"}

log = logging.getLogger(__name__)


def content_hash(paths: Iterable[Path]) -> str:
    """A short SHA-256 over the given files (and folders, recursively), independent of their mtime."""
    digest = hashlib.sha256()
    files: set[Path] = set()
    for path in paths:
        if path.is_dir():
            files.update(
                p
                for p in path.rglob("*")
                if p.is_file() and p.suffix in _HASHED_SUFFIXES and "__pycache__" not in p.parts
            )
        elif path.is_file():
            files.add(path)
    for file in sorted(files):
        digest.update(file.name.encode())
        digest.update(b"\0")
        digest.update(file.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:12]


@dataclass(frozen=True)
class EnvironmentEntry:
    """A registered environment class with its derived facts."""

    cls: type[Environment]

    @property
    def name(self) -> str:
        return self.cls.name

    @property
    def dataset(self) -> Dataset:
        return self.cls.dataset()

    @cached_property
    def version(self) -> str:
        source = Path(inspect.getfile(self.cls))
        # An environment in its own folder (environments/<name>/env.py) is versioned by the whole
        # folder.
        code = source.parent if source.name == "env.py" else source
        return content_hash([code, *self.dataset.files()])

    @cached_property
    def verifier_version(self) -> str:
        return self.cls.resolved_verifier_version()

    def warm(self) -> None:
        """Do now the slow work of first use: the version hashes, the dataset's index, and one task of each
        split (which imports a generator family's package and builds its generators, seconds in all).

        Blocking and CPU-heavy: the server runs it in a thread (`GYM_CATALOG_WARMUP`), never on the
        event loop.
        """
        _ = self.version, self.verifier_version, self.cls.catalog_tools()
        for split, size in self.dataset.split_sizes().items():
            if size:
                self.dataset.task_at(split, 0)

    def task(self, task_id: str) -> Task:
        task = self.dataset.get(task_id)
        if task is None:
            raise TaskNotFound(self.name, task_id)
        return task

    def draw(self, split: str | None, seed: int) -> Task:
        """The task a seed picks from a split (default `train`, else the first): the same env, split and
        seed always pick the same task, in every process (string seeds go through SHA-512, not hash()).

        Raises:
            SplitNotFound: no such split, or it holds no tasks.
        """
        name = self.split_name(split)
        index = random.Random(f"{self.name}\x00{name}\x00{seed}").randrange(self.dataset.split_sizes()[name])
        return self.dataset.task_at(name, index)

    def split_name(self, split: str | None) -> str:
        """The split a draw means: `split`, else `train`, else the dataset's first.

        Raises:
            SplitNotFound: no such split, or it holds no tasks.
        """
        sizes = self.dataset.split_sizes()
        name = split if split is not None else ("train" if "train" in sizes else next(iter(sizes), None))
        if name is None or sizes.get(name, 0) == 0:
            raise SplitNotFound(self.name, split, sizes)
        return name


class Registry:
    """The environments this server can run, by name."""

    def __init__(self, classes: Iterable[type[Environment]] = ()) -> None:
        self._entries: dict[str, EnvironmentEntry] = {}
        # Entry points (a family's name is its prefix, `reasoning_gym` for `reasoning_gym/gcd`) whose
        # environments need an extra that is not installed: asking for one says what to install.
        self._missing: dict[str, MissingExtra] = {}
        # Entry points whose environments are loaded, by name: what `scan` skips.
        self._loaded: set[str] = set()
        for cls in classes:
            self.add(cls)

    def __repr__(self) -> str:
        return f"Registry({sorted(self._entries)})"

    @classmethod
    def discover(cls, group: str = ENTRY_POINT_GROUP) -> Registry:
        """Load every environment advertised by installed distributions; broken ones are logged, skipped."""
        registry = cls()
        registry.merge(registry.scan(group))
        return registry

    def scan(self, group: str = ENTRY_POINT_GROUP) -> Registry:
        """The environments of the entry points this registry has not loaded (all of them the first time:
        those installed since, later), in a registry of their own for `merge`. Entry points that failed or
        lack an extra are tried again, so installing the extra or a fixed version is found too.

        Blocking (it imports the new distributions' modules): a running server calls it in a thread
        (`sessions.catalog`); it only reads this registry, so requests go on using it meanwhile.
        """
        importlib.invalidate_caches()  # the path finders' and metadata's caches of folders' contents
        found = Registry()
        for point in sorted(entry_points(group=group), key=lambda p: p.name):
            if point.name in self._loaded:
                continue
            try:
                loaded = point.load()
                classes = [loaded] if isinstance(loaded, type) else list(loaded())
                for env_cls in classes:
                    found.add(env_cls)
                found._loaded.add(point.name)
            except MissingExtra as exc:
                log.info("environment entry point %r is not offered: %s", point.name, exc)
                found._missing[point.name] = exc
            except Exception as exc:
                log.error("environment entry point %r (%s) failed to load: %s", point.name, point.value, exc)
        return found

    def merge(self, found: Registry) -> list[str]:
        """Add what `scan` found; returns the names added. A name another class already holds is refused
        (logged), as `add` refuses it. The table is replaced, not changed in place, so a thread iterating
        the old one (the catalog's warm-up) never sees it change size."""
        added: dict[str, EnvironmentEntry] = {}
        for name, entry in found._entries.items():
            existing = self._entries.get(name)
            if existing is not None and existing.cls is not entry.cls:
                log.error(
                    "environment %r of %s is refused: %s already holds the name",
                    name,
                    entry.cls.__module__,
                    existing.cls.__module__,
                )
            elif existing is None:
                added[name] = entry
        self._entries = {**self._entries, **added}
        self._missing = {k: v for k, v in self._missing.items() if k not in found._loaded} | found._missing
        self._loaded |= found._loaded
        return sorted(added)

    def add(self, cls: type[Environment]) -> None:
        if not (isinstance(cls, type) and issubclass(cls, Environment)):
            raise EnvironmentDefinitionError(f"{cls!r} is not an Environment subclass")
        cls.check_definition()
        if not ENV_NAME.match(cls.name):
            raise EnvironmentDefinitionError(
                f"environment name {cls.name!r} must be lowercase letters, digits, '_', '-', '.', "
                "with at most one '/' for a family"
            )
        existing = self._entries.get(cls.name)
        if existing is not None and existing.cls is not cls:
            raise EnvironmentDefinitionError(
                f"two environments are named {cls.name!r}: {existing.cls.__module__} and {cls.__module__}"
            )
        self._entries[cls.name] = EnvironmentEntry(cls)

    def warm(self, stop: threading.Event | None = None) -> None:
        """`EnvironmentEntry.warm` for every environment, until `stop` is set; one that fails is logged
        (its requests will say why) and the others still warm."""
        started = time.monotonic()
        for entry in self:
            if stop is not None and stop.is_set():
                return
            try:
                entry.warm()
            except Exception as exc:
                log.error("environment %r failed to warm up: %s: %s", entry.name, type(exc).__name__, exc)
        log.info("%d environments warmed up in %.1f s", len(self), time.monotonic() - started)

    def get(self, name: str) -> EnvironmentEntry:
        entry = self._entries.get(name)
        if entry is None:
            raise EnvironmentNotFound(name, list(self._entries), self.unavailable(name))
        return entry

    def unavailable(self, name: str) -> str | None:
        """Why `name` is not offered when its entry point needs an extra that is not installed, else None."""
        missing = self._missing.get(name.partition("/")[0])
        return str(missing) if missing else None

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __iter__(self) -> Iterator[EnvironmentEntry]:
        return iter(self._entries[name] for name in self.names())

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries
