"""Which policy versions sampled an episode: read from its recorded calls, kept as two columns.

A policy version is a trainer's step count, an integer that only grows within a run (announced with
`POST /v1/policy-runs/{run}/versions`). Each model call recorded on an episode may say which version
sampled it: a gateway call always does (`weight_version`, the run's announced version when the call
reached the gateway), a driver turn when its `turn_data` carries `weight_version`. Calls that say
nothing fall back to the episode's own `policy.weight_version`. An episode's `version_min` and
`version_max` are the oldest and newest of these; they differ when the weights changed while it was
being played (a partial rollout). A value that is not a whole number (a LoRA revision's name, say) is
no version and is left out, so episodes of runs that never announce keep NULL.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["VERSION_KEY", "as_version", "version_range"]

# The key of a call's version in a `turns` entry and of the episode's version in its `policy`.
VERSION_KEY = "weight_version"


def as_version(value: Any) -> int | None:
    """`value` as a policy version: an integer, or a string of decimal digits; anything else is None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdecimal() and value.isascii():
        return int(value)
    return None


def version_range(
    policy: Mapping[str, Any] | None, turns: Iterable[Mapping[str, Any]]
) -> tuple[int | None, int | None]:
    """The oldest and newest version among the calls in `turns`, each call without one counted at the
    episode's `policy` version; (None, None) when no call has a version."""
    fallback = as_version((policy or {}).get(VERSION_KEY))
    versions: set[int] = set()
    for turn in turns:
        version = as_version(turn.get(VERSION_KEY))
        if version is None:
            version = fallback
        if version is not None:
            versions.add(version)
    if not versions and fallback is not None:
        versions.add(fallback)
    if not versions:
        return None, None
    return min(versions), max(versions)
