"""The public SDK is exactly `gym_server.__all__`: nothing public is exported by accident."""

from __future__ import annotations

import gym_server


def test_all_lists_every_public_name() -> None:
    public = {name for name in vars(gym_server) if not name.startswith("_")}
    modules = {name for name in public if type(getattr(gym_server, name)).__name__ == "module"}
    assert set(gym_server.__all__) - {"__version__"} == public - modules
    assert gym_server.__all__ == sorted(gym_server.__all__)
