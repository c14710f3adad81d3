"""The public surfaces are exactly their `__all__`: nothing public is exported by accident.

`gym_server` is the SDK promised to environment authors; `gym_server.sdk.runtime` is what environments
and verifiers use of the runtime (sandboxes, worker pools, failure classes) instead of its internals.
"""

from __future__ import annotations

from types import ModuleType

import pytest

import gym_server
from gym_server.sdk import runtime


@pytest.mark.parametrize("module", [gym_server, runtime], ids=lambda module: module.__name__)
def test_all_lists_every_public_name(module: ModuleType) -> None:
    public = {name for name in vars(module) if not name.startswith("_")}
    modules = {name for name in public if isinstance(getattr(module, name), ModuleType)}
    assert set(module.__all__) - {"__version__"} == public - modules - {"annotations"}
    assert module.__all__ == sorted(module.__all__)
