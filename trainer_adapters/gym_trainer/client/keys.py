"""Which API key a gym client sends: the caller's, else `GYM_API_KEY`, so every client and adapter
(TRL, verl, OpenRLHF, ART, the CLI, scripts) works against a gym that requires keys without code changes.
"""

from __future__ import annotations

import os

__all__ = ["API_KEY_VARIABLE", "gym_api_key"]

API_KEY_VARIABLE = "GYM_API_KEY"


def gym_api_key(api_key: str | None = None) -> str | None:
    """`api_key` when given (the parameter wins; an empty string sends no key), else `$GYM_API_KEY`
    (empty or unset: no key)."""
    if api_key is not None:
        return api_key or None
    return os.environ.get(API_KEY_VARIABLE) or None
