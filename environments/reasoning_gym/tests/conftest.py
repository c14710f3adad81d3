"""The family's tests keep the gym's data folder (`$GYM_HOME`: the task cache, the default store) in a
folder of the session's own, never the user's ~/.local/share/gym-server: the service tests' fixture
(tests/conftest.py, on the test path), used here too."""

from __future__ import annotations

from conftest import _gym_home

__all__ = ["_gym_home"]
