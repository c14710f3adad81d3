"""The import paths of the code that moved out of `gym_server` into the workspace's own distributions
(docs/decisions.md, "A workspace of five distributions"), kept working for a deprecation period.

Until gym-server 0.3, `gym_server.trainer_adapters.*`, `gym_server.verifiers.*`, `gym_server.datasets` and
`gym_server.environments.<name>.*` import the module at its new home (`gym_trainer`, `gym_verifiers`,
`gym_datasets`, `gym_env_<name>`) under the old name too: the same module object, so classes compare equal
and `isinstance` holds across both spellings, with one DeprecationWarning naming the new path. This is a
compatibility alias for code written against 0.1 (a trainer script, a verl config's dotted path, an
author's environment), not the layout: the code lives where static tools read it, and the project itself
imports only the new names (`tests/test_moved_imports.py` checks that the old ones still resolve).
The one-line migration is a rename: `gym_server.trainer_adapters` -> `gym_trainer`, `gym_server.verifiers` ->
`gym_verifiers`, `gym_server.environments.<name>` -> `gym_env_<name>` (docs/install.md, "Upgrading from 0.1").
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Sequence

__all__ = ["REMOVED_IN", "install", "new_name"]

REMOVED_IN = "0.3"
_PREFIXES = {
    "gym_server.trainer_adapters": "gym_trainer",
    "gym_server.verifiers": "gym_verifiers",
    "gym_server.datasets": "gym_datasets",
}
_ENVIRONMENTS = "gym_server.environments"


def new_name(old: str) -> str | None:
    """The module an old dotted path now names, or None when `old` did not move."""
    for prefix, target in _PREFIXES.items():
        if old == prefix or old.startswith(prefix + "."):
            return target + old[len(prefix) :]
    if old.startswith(_ENVIRONMENTS + "."):
        name, _, rest = old[len(_ENVIRONMENTS) + 1 :].partition(".")
        return f"gym_env_{name}" + (f".{rest}" if rest else "")
    return None


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module at its new home (the same object, not a copy)."""

    def __init__(self, target: str | None) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        if self.target is None:  # `gym_server.environments` itself: an empty parent of the moved names
            parent = types.ModuleType(spec.name, "Moved: each built-in environment is gym_env_<name>.")
            parent.__path__ = []
            return parent
        warnings.warn(
            f"{spec.name} moved to {self.target}; the old name is removed in gym-server {REMOVED_IN}",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(self.target)

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: the module was imported (and run) under its new name."""


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == _ENVIRONMENTS:
            return importlib.machinery.ModuleSpec(fullname, _Alias(None), is_package=True)
        moved = new_name(fullname)
        if moved is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(moved), is_package=True)


def install() -> None:
    """Put the alias finder first on `sys.meta_path` (once)."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())
