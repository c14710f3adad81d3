"""JSON text in and out, faithful to what clients send: any integer survives, NaN and Infinity are refused.

orjson is the fast path everywhere, but it has two silent losses that would change a stored trajectory:
it cannot write an integer beyond 64 bits (a `TypeError`), and it reads one back as a float. JSON itself
has no such limit, so `dumps` falls back to the standard library for such values and `loads` reads any
text holding a run of 19 or more digits with it (that run is the only way such an integer can appear).
NaN and Infinity are not JSON at all: Python's `json` and pydantic accept them, orjson writes them as
`null`. Bodies are therefore read with `loads_strict` (or checked with `refuse_non_finite` where pydantic
parsed them already), so such a value is refused with a 422 before anything is applied, instead of being
stored as something else.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import orjson

__all__ = ["dumps", "loads", "loads_strict", "refuse_non_finite"]

_LONG_DIGIT_RUN = re.compile(rb"[0-9]{19}")


def dumps(value: Any, default: Callable[[Any], Any] | None = None) -> bytes:
    """Compact JSON; dict keys may be non-strings, NUL and non-ASCII text are kept as they are.

    `default` turns an object JSON has no form for into one that it has, as in `json.dumps`.

    Raises:
        ValueError: `value` holds a NaN or an infinity beyond a 64-bit integer's reach (never written
            as `null`); TypeError: it holds something that is not JSON.
    """
    try:
        return orjson.dumps(value, default=default, option=orjson.OPT_NON_STR_KEYS)
    except TypeError as exc:
        if "64-bit" not in str(exc):
            raise
    text = json.dumps(value, default=default, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.encode()


def loads(raw: bytes | str) -> Any:
    """Parse JSON written by `dumps` (or anyone), keeping integers of any size exact."""
    data = raw.encode() if isinstance(raw, str) else raw
    if _LONG_DIGIT_RUN.search(data):
        return json.loads(data)
    return orjson.loads(data)


def _refuse_constant(name: str) -> Any:
    raise _NonFinite(name)


class _NonFinite(ValueError):
    pass


def loads_strict(raw: bytes | str) -> Any:
    """`json.loads` that refuses NaN and ±Infinity, which are not JSON.

    Raises:
        json.JSONDecodeError: the text is not JSON, or holds NaN or Infinity (its message says which).
    """
    text = raw.decode() if isinstance(raw, bytes) else raw
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except _NonFinite as exc:
        name = str(exc)
        raise json.JSONDecodeError(
            f"{name} is not JSON; send a finite number, or null", text, max(text.find(name), 0)
        ) from None


def refuse_non_finite(raw: bytes) -> None:
    """Raise like `loads_strict` if `raw` (already valid JSON to a lenient parser) holds NaN or Infinity.

    The substring test is a memchr-speed scan, so bodies without those words (nearly all) cost nothing more.
    """
    if b"NaN" in raw or b"Infinity" in raw:
        loads_strict(raw)
