"""Is a math answer written in the form the task asks for? The check `math_match` runs before parsing.

math-verify compares values, so without this an answer that merely restates the problem scores 1.0:
`\\boxed{(38 + 15) \\times 29 - 19}` *equals* 1518, `\\boxed{\\binom{10}{3}}` equals 120,
`\\boxed{\\sqrt{72}}` equals `6\\sqrt{2}` and `\\boxed{\\frac{74}{60}}` equals `\\frac{37}{30}`. The
task asked for a number, a simplified radical or a fraction in lowest terms; an unevaluated expression
is not an answer. The check is a cheap regular-expression pass in the caller's process, so refused
answers never reach the worker pool.

Forms (`AnswerForm`):

- `auto` (the default): the reference's own shape says what is asked. A reference that is a plain
  number (`42`, `-3.5`, `\\frac{3}{4}`, `12\\%`, `x = 3`) asks for a `number`; one that is a number
  times `\\pi` or a square root (`25\\pi`, `6\\sqrt{2}`) asks for exactly that shape, with the radicand
  square-free; any other reference (an expression, an equation, a set, an interval) is not checked.
- `number`: one literal: an integer (thousands separators allowed), a decimal, or a fraction in lowest
  terms (`\\frac{p}{q}`, `p/q`, denominator above 1), optionally signed, optionally `var =` in front,
  a `\\%` after and a `\\text{}` unit.
- `fraction`: as `number`, but no decimals: an integer or a fraction in lowest terms.
- `any`: no check (math-verify's equivalence alone).
"""

from __future__ import annotations

import math
import re
from typing import Literal, get_args

__all__ = ["ANSWER_FORMS", "AnswerForm", "form_problem"]

AnswerForm = Literal["auto", "number", "fraction", "any"]
ANSWER_FORMS: frozenset[str] = frozenset(get_args(AnswerForm))

_UNITS = re.compile(r"(?:\\(?:text|mathrm|textrm|mbox)\s*\{[A-Za-z ./]*\}\s*)+$")  # trailing only
MAX_RADICAND_DIGITS = 8  # square-freeness by trial division stays under 10,000 steps
_NOISE = re.compile(r"\\left|\\right|\\displaystyle|\\[!,;: ]|~|\$|\s")
_VARIABLE = r"(?:[A-Za-z](?:_\{?[A-Za-z0-9]+\}?)?=)?"
_INTEGER = r"(?:\d{1,3}(?:,\d{3})+|\d+)"
_FRACTION = (
    r"(?:\\frac\{(?P<n1>[-+]?\d+)\}\{(?P<d1>\d+)\}|\\frac(?P<n2>\d)(?P<d2>\d)|(?P<n3>\d+)/(?P<d3>\d+))"
)
_LITERAL = rf"[-+]?(?:{_FRACTION}|(?P<int>{_INTEGER})(?P<dec>\.\d+)?|(?P<bare>\.\d+))"
_NUMBER = re.compile(rf"^{_VARIABLE}{_LITERAL}(?:\\?%)?$")
_CONSTANT = re.compile(
    rf"^{_VARIABLE}(?P<coefficient>{_LITERAL})?(?:\\cdot|\\times)?"
    r"(?P<constant>\\pi|\\sqrt\{(?P<r1>\d+)\}|\\sqrt(?P<r2>\d))$"
)


def form_problem(answer: str, reference: str, form: AnswerForm = "auto") -> str | None:
    """Why `answer` is not in the form asked (`form`, or the reference's shape for `auto`); None if it is."""
    if form == "any":
        return None
    if form == "auto":
        shape = _normalize(reference)
        if _NUMBER.match(shape):
            form = "number"
        else:
            constant = _CONSTANT.match(shape)
            if constant is None:
                return None  # an expression, equation or set: equivalence alone decides
            return _constant_problem(_normalize(answer), _kind(constant))
    return _number_problem(_normalize(answer), decimals=form == "number")


def _normalize(text: str) -> str:
    text = text.replace("\u2212", "-").replace("{,}", ",")
    text = re.sub(r"\\[dt]frac", r"\\frac", _UNITS.sub("", text.strip()))
    return _NOISE.sub("", text).rstrip(".")


def _number_problem(answer: str, *, decimals: bool) -> str | None:
    asked = "a number" if decimals else "an integer or a fraction in lowest terms"
    match = _NUMBER.match(answer)
    if match is None:
        return f"not written as {asked}: give the value itself, not an expression for it"
    if not decimals and (match["dec"] or match["bare"]):
        return f"a decimal where the task asks for {asked}"
    return _fraction_problem(match)


def _fraction_problem(match: re.Match[str]) -> str | None:
    for n, d in (("n1", "d1"), ("n2", "d2"), ("n3", "d3")):
        if match[n] is not None:
            numerator, denominator = abs(int(match[n])), int(match[d])
            if denominator == 0:
                return "a fraction with denominator 0"
            if denominator == 1 or math.gcd(numerator, denominator) != 1:
                return "a fraction not in lowest terms"
    return None


def _constant_problem(answer: str, kind: str) -> str | None:
    asked = "a number times \\pi" if kind == "pi" else "a simplified radical such as 6\\sqrt{2}"
    match = _CONSTANT.match(answer)
    if match is None or _kind(match) != kind:
        return f"not written as {asked}: give the value itself, not an expression for it"
    problem = _fraction_problem(match)  # the coefficient's
    if problem is not None:
        return problem
    radicand = match["r1"] or match["r2"]
    if radicand is not None and len(radicand) > MAX_RADICAND_DIGITS:
        return f"a radicand over {MAX_RADICAND_DIGITS} digits; refused unchecked"
    if radicand is not None and not _square_free(int(radicand)):
        return f"a radical not simplified: \\sqrt{{{radicand}}} has a square factor to take out"
    return None


def _kind(match: re.Match[str]) -> str:
    return "pi" if match["constant"] == "\\pi" else "sqrt"


def _square_free(value: int) -> bool:
    if value < 2:
        return False
    factor = 2
    while factor * factor <= value:
        if value % (factor * factor) == 0:
            return False
        factor += 1
    return True
