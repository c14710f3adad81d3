"""Numeric answers compared with an absolute and a relative tolerance, exactly (rational arithmetic).

`parse_number` reads one number written the way people and models write them: integers, decimals
(`.5`), signs (the Unicode minus too), fractions (`3/4`, `\\frac{3}{4}`, `\\dfrac34`), percentages
(`12%`, `12\\%`, `12 percent`: the value is 0.12), thousands separators (`1,234,567`, `1_234`,
`1'234`, thin spaces, LaTeX `1{,}234` and `1\\,234`, always groups of three after a non-zero lead),
scientific notation (`1.5e-3`, `1.5 \\times 10^{-3}`), and `$` or `\\text{}` decoration. It refuses, rather
than guesses, whatever has two readings: `1,5` (a decimal comma or a list?), `1 234`, `1.234,5`, several
numbers (`3 or 4`, `between 2 and 5`), exponents beyond ±400 and non-finite values.

`numeric_match` extracts the final answer first (`\\boxed{}`, `<answer>`, "the answer is", see
`format.final_answer`), else reads the whole response, and scores 1.0 when
`|x - ref| <= max(abs_tol, rel_tol * max(|x|, |ref|))`. When exactly one side carries a percent sign
the percent is also read as a plain number, so `12%` matches both `12` and `0.12`. A response that boxes
several different values scores 0 (hedging), however many of them are right.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from fractions import Fraction

from gym_verifiers.format import MAX_CANDIDATES, MAX_TEXT_CHARS, final_answer
from gym_verifiers.result import Failure, VerifierResult

__all__ = ["NumberError", "ParsedNumber", "numeric_match", "parse_number"]

MAX_EXPONENT = 400  # 10**400 is past any float; bigger exponents only cost time
MAX_DIGITS = 400

_DECORATION = [
    (re.compile(r"\\text\s*\{([^{}]*)\}|\\mathrm\s*\{([^{}]*)\}"), lambda m: m.group(1) or m.group(2) or ""),
    (re.compile(r"\{,\}|\\,|\\ "), lambda m: "," if m.group() == "{,}" else "_"),
    (re.compile(r"\\[dt]frac"), lambda m: "\\frac"),
    (re.compile(r"\\frac\s*(\d)\s*(\d)"), lambda m: f"\\frac{{{m.group(1)}}}{{{m.group(2)}}}"),
    (re.compile(r"\\left|\\right|\\!|\\displaystyle|\$|\\[()\[\]]"), lambda m: ""),
    (re.compile(r"\\%"), lambda m: "%"),
    (  # 1.5 \times 10^{-3} and friends become 1.5e-3
        re.compile(r"(\d)\s*(?:\\times|\\cdot|×|\*|x)\s*10\s*\^\s*\{?\s*([-+]?\d+)\s*\}?"),
        lambda m: f"{m.group(1)}e{m.group(2)}",
    ),
]
_THIN_SPACE_GROUP = re.compile(r"(?<=\d)[\u2009\u202f](?=\d)")
_SIGNS = str.maketrans({"\u2212": "-", "\u2013": "-", "\ufe63": "-", "\uff0b": "+"})
_NUMBER = re.compile(
    r"""
    (?<![\d.])(?<!\d,)(?P<sign>[-+])?\s*(?<![\w.])
    (?:
        \\frac\{\s*(?P<fn>[-+]?[\d.]+)\s*\}\{\s*(?P<fd>[-+]?[\d.]+)\s*\}
      | (?P<int>[1-9]\d{0,2}(?P<sep>[,_'])\d{3}(?:(?P=sep)\d{3})*|\d+)
        (?P<frac>\.\d+)?
        (?:[eE](?P<exp>[-+]?\d+))?
        (?:\s*/\s*(?P<den>\d+(?:\.\d+)?))?
      | (?P<bare>\.\d+)
    )
    (?![.,]\d)(?!\d)
    (?P<pct>\s*(?:%|percent\b))?
    """,
    re.VERBOSE | re.IGNORECASE,
)


class NumberError(ValueError):
    """The text holds no number, or more than one reading of one."""


@dataclass(frozen=True, slots=True)
class ParsedNumber:
    """A parsed number: its exact value (a percent already divided by 100) and how it was written."""

    value: Fraction
    percent: bool
    text: str

    def readings(self) -> list[Fraction]:
        """The values it may stand for: a percent may also be meant as its bare number."""
        return [self.value, self.value * 100] if self.percent else [self.value]


def parse_number(text: str) -> ParsedNumber:
    """Parse exactly one number from `text`.

    Raises:
        NumberError: no number, several numbers, an ambiguous separator, or an out-of-range value.
    """
    # Thin spaces between digits group thousands; NFKC would turn them into ordinary (ambiguous) spaces.
    cleaned = unicodedata.normalize("NFKC", _THIN_SPACE_GROUP.sub("_", text)).translate(_SIGNS)
    for pattern, replace in _DECORATION:
        cleaned = pattern.sub(replace, cleaned)
    matches = list(_NUMBER.finditer(cleaned))
    if not matches:
        raise NumberError(f"no unambiguous number in {_shorten(text)!r}")
    if len(matches) > 1:
        shown = ", ".join(_shorten(m.group().strip(), 20) for m in matches[:4])
        raise NumberError(f"several numbers ({shown}); give exactly one")
    match = matches[0]
    if match.group("fn") is not None:
        value = _to_fraction(match.group("fn")) / _nonzero(_to_fraction(match.group("fd")))
    elif match.group("bare") is not None:
        value = _to_fraction(match.group("bare"))
    else:
        digits = re.sub(r"[,_']", "", match.group("int")) + (match.group("frac") or "")
        exponent = int(match.group("exp") or 0)
        if abs(exponent) > MAX_EXPONENT:
            raise NumberError(f"exponent {exponent} is out of range (at most ±{MAX_EXPONENT})")
        value = _to_fraction(digits) * Fraction(10) ** exponent
        if match.group("den") is not None:
            value /= _nonzero(_to_fraction(match.group("den")))
    if match.group("sign") == "-":
        value = -value
    percent = match.group("pct") is not None
    return ParsedNumber(value / 100 if percent else value, percent, match.group().strip())


def numeric_match(
    response: str, reference: str | float, *, abs_tol: float = 0.0, rel_tol: float = 1e-9
) -> VerifierResult:
    """1.0 when the response's final number is within tolerance of the reference's."""
    if abs_tol < 0 or rel_tol < 0:
        return VerifierResult.zero("tolerances must not be negative", failure=Failure.INVALID_REFERENCE)
    try:
        expected = parse_number(str(reference))
    except NumberError as exc:
        return VerifierResult.zero(f"reference is not a number: {exc}", failure=Failure.INVALID_REFERENCE)
    no_number = {"parsed": 0.0, "within_tolerance": 0.0}
    if len(response) > MAX_TEXT_CHARS:
        return VerifierResult.zero(f"response longer than {MAX_TEXT_CHARS} characters", no_number)
    answer = final_answer(response)
    candidates = answer.candidates or (response,)
    if len(candidates) > MAX_CANDIDATES:
        return VerifierResult.zero(
            f"hedged: {len(candidates)} different answers score 0", {"parsed": 1.0, "within_tolerance": 0.0}
        )
    try:
        parsed = [parse_number(candidate) for candidate in candidates]
    except NumberError as exc:
        return VerifierResult.zero(f"could not read the answer: {exc}", no_number)
    if len({number.value for number in parsed}) > 1:
        shown = ", ".join(number.text for number in parsed[:4])
        return VerifierResult.zero(
            f"hedged: {len(parsed)} different answers ({shown}) score 0",
            {"parsed": 1.0, "within_tolerance": 0.0},
        )
    got = parsed[-1]
    # A percent sign on exactly one side may be meant either way; on both sides (or neither) it is literal.
    pairs = (
        [(x, y) for x in got.readings() for y in expected.readings()]
        if got.percent != expected.percent
        else [(got.value, expected.value)]
    )
    hit = any(_close(x, y, Fraction(abs_tol), Fraction(rel_tol)) for x, y in pairs)
    verdict = "within tolerance of" if hit else "differs from"
    return VerifierResult.binary(
        hit,
        f"{got.text} {verdict} the reference {expected.text}",
        {"parsed": 1.0, "within_tolerance": float(hit)},
    )


def _close(x: Fraction, y: Fraction, abs_tol: Fraction, rel_tol: Fraction) -> bool:
    return abs(x - y) <= max(abs_tol, rel_tol * max(abs(x), abs(y)))


def _to_fraction(digits: str) -> Fraction:
    if sum(ch.isdigit() for ch in digits) > MAX_DIGITS:
        raise NumberError(f"more than {MAX_DIGITS} digits")
    try:
        return Fraction(digits)
    except ValueError as exc:
        raise NumberError(f"{_shorten(digits)!r} is not a number") from exc


def _nonzero(value: Fraction) -> Fraction:
    if value == 0:
        raise NumberError("division by zero")
    return value


def _shorten(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
