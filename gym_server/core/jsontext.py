"""JSON text in and out, faithful to what clients send: any integer survives, NaN and Infinity are refused.

orjson is the fast path everywhere, but it has two silent losses that would change a stored trajectory:
it cannot write an integer beyond 64 bits (a `TypeError`), and it reads one back as a float. JSON itself
has no such limit, so `dumps` falls back to the standard library for such values and `loads` reads any
text holding a run of 19 or more digits with it (that run is the only way such an integer can appear).
NaN and Infinity are not JSON at all: Python's `json` and pydantic accept them, orjson writes them as
`null`; a number too large for a double (`1e400`) is read as infinity and would be stored as `null` too;
an escaped lone UTF-16 surrogate (`"\\ud800"`) is read into a Python string that can never be encoded
(the store refused the whole trajectory, after the 2xx); JSON nested deeper than the writer goes cannot
be stored either. Bodies are therefore read with `loads_strict` (or checked with `refuse_unstorable`
where pydantic parsed them already), so such a value is refused with a 422 before anything is applied,
instead of being stored as something else or not at all.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

import orjson
import pydantic_core

__all__ = ["MAX_DEPTH", "dumps", "holds_non_finite", "loads", "loads_strict", "refuse_unstorable"]

# Every digit read as `0`: a run of digits is then a plain substring (`in`), cheaper than a regular
# expression, whose engine is cold between two requests on a busy server (docs/benchmarks.md, "Round 7").
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_INTEGER = b"0" * 19  # an integer orjson cannot read exactly may be this long
# The deepest nesting a body may have: pydantic's JSON parser (every fast-path body) stops at this
# depth, and orjson writes 254 levels at most, so whatever a body holds, nested in a trajectory's
# columns, can be written.
MAX_DEPTH = 200
# Where a surrogate may hide: an escape `\uD800`-`\uDFFF`. The scan pairs them up and must see escaped
# backslashes too, so that `\\ud800` (a backslash, then text) is not taken for one.
_SURROGATE_HINT = re.compile(rb"\\u[dD][89a-fA-F]")
_ESCAPES = re.compile(rb"\\\\|\\u[dD]([89abAB]|[c-fC-F])[0-9a-fA-F]{2}")
# A number a double cannot hold: a digit's exponent of three digits or more, or a run of 309 digits.
_LARGE_EXPONENT = re.compile(rb"[0-9][eE]\+?0*[1-9][0-9]{2}")
_DOUBLE_DIGITS = b"0" * 309
# Digits and `+` read as `0`, `E` as `e`: an exponent can then only be where `0e0` is.
_EXPONENT_SHAPE = bytes.maketrans(b"123456789+E", b"0000000000e")


def _may_overflow(data: bytes) -> bool:
    """Whether `data` may hold a number beyond a double's range (a hint: the parsed value decides).

    One `translate` and two `in` look for the shape first; the regular expression runs only where an
    exponent may be (see `_DIGITS_AS_ZERO` for why)."""
    shape = data.translate(_EXPONENT_SHAPE)
    if b"0e0" in shape and _LARGE_EXPONENT.search(data) is not None:
        return True
    return len(data) >= len(_DOUBLE_DIGITS) and _DOUBLE_DIGITS in shape


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
    if len(data) >= len(_LONG_INTEGER) and _LONG_INTEGER in data.translate(_DIGITS_AS_ZERO):
        return json.loads(data)
    return orjson.loads(data)


def _refuse_constant(name: str) -> Any:
    raise _NonFinite(name)


class _NonFinite(ValueError):
    pass


def loads_strict(raw: bytes | str) -> Any:
    """Parse a request body, refusing what `refuse_unstorable` refuses and nesting deeper than `MAX_DEPTH`.

    The parser is pydantic's, as on the fast path: the same depth limit, integers of any size exact.

    Raises:
        json.JSONDecodeError: the text is not JSON, or holds a value the gym cannot store (its message
            says which).
    """
    text, data = (raw.decode(), raw) if isinstance(raw, bytes) else (raw, raw.encode())
    if b"NaN" in data or b"Infinity" in data:
        try:
            json.loads(text, parse_constant=_refuse_constant)
        except _NonFinite as exc:
            name = str(exc)
            raise json.JSONDecodeError(
                f"{name} is not JSON; send a finite number, or null", text, max(text.find(name), 0)
            ) from None
    _refuse_lone_surrogate(data)
    try:
        value = pydantic_core.from_json(data, allow_inf_nan=False)
    except ValueError as exc:
        message = str(exc)
        if "recursion limit" in message:
            message = f"JSON nested deeper than {MAX_DEPTH} levels cannot be stored"
        raise json.JSONDecodeError(message, text, 0) from None
    if _may_overflow(data) and holds_non_finite(value):
        raise _overflow_error(text)
    return value


def _lone_surrogate_at(raw: bytes) -> int | None:
    """The offset of the first escaped UTF-16 surrogate in `raw` that is not half of a pair, if any."""
    if b"\\u" not in raw or _SURROGATE_HINT.search(raw) is None:  # nearly every body: no `\u` at all
        return None
    high_at = -1  # offset of a high surrogate waiting for its low half, which must follow at once
    for match in _ESCAPES.finditer(raw):
        half = match.group(1)
        if high_at >= 0:
            if half is not None and half not in b"89abAB" and match.start() == high_at + 6:
                high_at = -1
                continue
            return high_at
        if half is None:
            continue  # an escaped backslash
        if half in b"89abAB":
            high_at = match.start()
        else:
            return match.start()
    return high_at if high_at >= 0 else None


def holds_non_finite(value: Any) -> bool:
    """Whether a parsed JSON value holds a non-finite float (an overflow to infinity, a NaN): JSON text
    cannot carry one, so a stored copy would read `null`."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _refuse_lone_surrogate(data: bytes) -> None:
    surrogate_at = _lone_surrogate_at(data)
    if surrogate_at is not None:
        escape = data[surrogate_at : surrogate_at + 6].decode()
        raise json.JSONDecodeError(
            f"{escape} is an unpaired UTF-16 surrogate, not text: it could be neither stored nor sent on",
            data.decode(errors="replace"),
            surrogate_at,
        )


def _overflow_error(text: str) -> json.JSONDecodeError:
    return json.JSONDecodeError(
        "a number is beyond the range of a double (it would be stored as null); send it as a string", text, 0
    )


def refuse_unstorable(raw: bytes) -> None:
    """Raise like `loads_strict` if `raw` (already parsed by pydantic, which limits its depth) holds a value
    the gym could not store as sent: NaN or Infinity, a number beyond a double's range, a lone surrogate.

    Each test starts with a C-speed scan for what such a value must look like, so bodies without one
    (nearly all) cost nothing more.

    Raises:
        json.JSONDecodeError: the message says which value and where.
    """
    if b"NaN" in raw or b"Infinity" in raw:
        loads_strict(raw)
    _refuse_lone_surrogate(raw)
    if _may_overflow(raw) and holds_non_finite(json.loads(raw)):
        raise _overflow_error(raw.decode(errors="replace"))
