"""Procedural tasks of the `math` environment, written to `gym_datasets/math/{train,validation}.jsonl`.

Every problem is drawn from a fixed-seed `random.Random` and solved here with exact arithmetic
(`fractions.Fraction`, `math.comb`), so each answer is right by construction and the files are
byte-for-byte reproducible:

    python -m gym_env_math.generate          # rewrite the dataset
    python -m gym_env_math.generate --check  # exit 1 if the files differ

Families (cycled in order, so both splits hold each in the same proportion): integer arithmetic,
fraction arithmetic, linear equations, percentages, rates, quadratics, systems of two equations,
combinatorics, number theory and geometry. Answers are LaTeX strings (`42`, `-\\frac{3}{4}`, `12.5`,
`6\\sqrt{2}`, `25\\pi`) that math-verify parses; metadata names the family and a difficulty 1-3, and
`answer_form` where a family's prompt asks for a form stricter than the reference's shape (the fraction
family: "a fraction in lowest terms", so no decimals; see `gym_verifiers.math`).
"""

from __future__ import annotations

import argparse
import json
import math
import operator
import random
import sys
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

from gym_server.sdk.tasks import DATASETS_ROOT

__all__ = ["ANSWER_FORMS", "FAMILIES", "SEED", "SPLITS", "generate", "render", "write"]

SEED = 20_251_121
SPLITS = {"train": 400, "validation": 100}
ID_FORMAT = "math-{:05d}"

Problem = tuple[str, str, int]  # prompt, LaTeX answer, difficulty
# The answer form a family's prompt asks for, where the reference's own shape does not say it all.
ANSWER_FORMS = {"fractions": "fraction"}


def latex_number(value: Fraction) -> str:
    """An exact rational as LaTeX: `7`, `-\\frac{3}{4}` (lowest terms, sign in front)."""
    if value.denominator == 1:
        return str(value.numerator)
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


def _decimal(value: Fraction) -> str:
    """A rational with a terminating expansion, written as a plain decimal (`12.5`, `36`)."""
    text = f"{float(value):.6f}".rstrip("0").rstrip(".")
    assert Fraction(text) == value, "only terminating decimals belong here"
    return text


def _arithmetic(rng: random.Random) -> Problem:
    a, b, c, d = (rng.randint(2, 40) for _ in range(4))
    shape = rng.randrange(3)
    if shape == 0:
        return f"Compute $({a} + {b}) \\times {c} - {d}$.", str((a + b) * c - d), 1
    if shape == 1:
        return f"Compute ${a} \\times {b} - {c} \\times {d}$.", str(a * b - c * d), 1
    q = rng.randint(2, 12)
    return f"Compute $({a * q} \\div {q} + {b}) \\times {c}$.", str((a + b) * c), 2


def _fractions(rng: random.Random) -> Problem:
    x = Fraction(rng.randint(1, 9), rng.randint(2, 12))
    y = Fraction(rng.randint(1, 9), rng.randint(2, 12))
    op, symbol = rng.choice([(operator.add, "+"), (operator.sub, "-"), (operator.mul, "\\times")])
    expression = f"{latex_number(x)} {symbol} {latex_number(y)}"
    return (
        f"Compute ${expression}$. Give the answer as a fraction in lowest terms.",
        latex_number(op(x, y)),
        2,
    )


def _linear(rng: random.Random) -> Problem:
    while True:  # draw until the right-hand constant is an integer
        x = Fraction(rng.randint(-12, 12), rng.choice([1, 1, 1, 2, 3]))
        a, c, b = rng.randint(2, 9), rng.randint(-5, 9), rng.randint(-20, 20)
        d = (a - c) * x + b  # so that a*x + b = c*x + d
        if c != a and d.denominator == 1:
            break
    rhs = f"{_term(c)} {'+' if d >= 0 else '-'} {abs(d.numerator)}" if c else str(d.numerator)
    lhs = f"{_term(a)} {'+' if b >= 0 else '-'} {abs(b)}"
    return f"Solve for $x$: ${lhs} = {rhs}$.", latex_number(x), 2 if x.denominator == 1 else 3


def _term(coefficient: int) -> str:
    return {1: "x", -1: "-x"}.get(coefficient, f"{coefficient}x")


def _percentages(rng: random.Random) -> Problem:
    shape = rng.randrange(3)
    if shape == 0:
        p, n = rng.choice([5, 10, 12, 15, 20, 25, 30, 40, 75]), rng.randint(2, 60) * 20
        return f"What is ${p}\\%$ of ${n}$?", _decimal(Fraction(p * n, 100)), 1
    if shape == 1:
        price, p = rng.randint(4, 50) * 20, rng.choice([10, 15, 20, 25, 30, 35, 40])
        rise = rng.random() < 0.5
        new = Fraction(price * (100 + p if rise else 100 - p), 100)
        verb = "increases" if rise else "decreases"
        return (
            f"A price of ${price}$ dollars {verb} by ${p}\\%$. What is the new price in dollars?",
            _decimal(new),
            2,
        )
    whole, p = rng.randint(1, 40) * 20, rng.choice([5, 10, 20, 25, 40, 50, 60, 75])  # 20 * p / 100 is whole
    return f"What percent of ${whole}$ is ${whole * p // 100}$?", f"{p}\\%", 2


def _rates(rng: random.Random) -> Problem:
    speed, hours = rng.randint(3, 30) * 5, Fraction(rng.randint(2, 12), 2)
    shape = rng.randrange(2)
    if shape == 0:
        prompt = (
            f"A train travels at ${speed}$ km/h for ${_decimal(hours)}$ hours. How many kilometres is that?"
        )
        return prompt, _decimal(speed * hours), 1
    workers, days = rng.randint(2, 8), rng.randint(2, 12)
    more = workers * rng.randint(2, 3)
    prompt = (
        f"${workers}$ workers finish a job in ${days}$ days. Working at the same rate, how many days do "
        f"${more}$ workers need?"
    )
    return prompt, latex_number(Fraction(workers * days, more)), 2


def _quadratics(rng: random.Random) -> Problem:
    r, s = rng.randint(-9, 9), rng.randint(-9, 9)
    while r + s == 0 or r * s == 0:  # keep all three terms of the polynomial
        r, s = rng.randint(-9, 9), rng.randint(-9, 9)
    b, c = -(r + s), r * s
    poly = f"x^2 {'+' if b >= 0 else '-'} {abs(b)}x {'+' if c >= 0 else '-'} {abs(c)}"
    if rng.random() < 0.5:
        return f"What is the sum of the roots of ${poly} = 0$?", str(r + s), 2
    return f"What is the product of the roots of ${poly} = 0$?", str(r * s), 2


def _systems(rng: random.Random) -> Problem:
    x, y = rng.randint(-10, 10), rng.randint(-10, 10)
    a, b = rng.randint(1, 5), rng.randint(1, 5)
    prompt = f"If $x + y = {x + y}$ and ${a}x - {b}y = {a * x - b * y}$, what is $x \\cdot y$?"
    return prompt, str(x * y), 3


def _combinatorics(rng: random.Random) -> Problem:
    shape = rng.randrange(3)
    if shape == 0:
        n, k = rng.randint(5, 15), rng.randint(2, 4)
        return (
            f"In how many ways can a committee of ${k}$ be chosen from ${n}$ people?",
            str(math.comb(n, k)),
            2,
        )
    if shape == 1:
        n, k = rng.randint(4, 10), rng.randint(2, 3)
        prompt = f"In how many ways can ${k}$ distinct medals be awarded to ${n}$ runners (one medal each)?"
        return prompt, str(math.perm(n, k)), 2
    word = rng.choice(["LEVEL", "BANANA", "LETTER", "COOKIE", "PEPPER", "BALLOON", "ACCESS", "TATTOO"])
    count = math.factorial(len(word))
    for letter in set(word):
        count //= math.factorial(word.count(letter))
    return f"How many distinct arrangements of the letters of {word} are there?", str(count), 3


def _number_theory(rng: random.Random) -> Problem:
    shape = rng.randrange(3)
    a, b = rng.randint(12, 180), rng.randint(12, 180)
    if shape == 0:
        return f"What is the greatest common divisor of ${a}$ and ${b}$?", str(math.gcd(a, b)), 1
    if shape == 1:
        return f"What is the least common multiple of ${a}$ and ${b}$?", str(math.lcm(a, b)), 2
    base, power, modulus = rng.randint(2, 9), rng.randint(5, 30), rng.randint(5, 13)
    return (
        f"What is the remainder when ${base}^{{{power}}}$ is divided by ${modulus}$?",
        str(pow(base, power, modulus)),
        3,
    )


def _geometry(rng: random.Random) -> Problem:
    shape = rng.randrange(3)
    k = rng.randint(1, 6)
    if shape == 0:
        a, b, c = (k * side for side in rng.choice([(3, 4, 5), (5, 12, 13), (8, 15, 17), (7, 24, 25)]))
        return f"A right triangle has legs ${a}$ and ${b}$. How long is its hypotenuse?", str(c), 1
    if shape == 1:
        r = rng.randint(2, 15)
        return f"What is the area of a circle of radius ${r}$? Give an exact answer.", f"{r * r}\\pi", 2
    k, square_free = rng.randint(2, 9), rng.choice([2, 3, 5, 6, 7, 10, 11])
    return f"Simplify $\\sqrt{{{k * k * square_free}}}$.", f"{k}\\sqrt{{{square_free}}}", 2


FAMILIES: dict[str, Callable[[random.Random], Problem]] = {
    "arithmetic": _arithmetic,
    "fractions": _fractions,
    "linear_equations": _linear,
    "percentages": _percentages,
    "rates": _rates,
    "quadratics": _quadratics,
    "systems": _systems,
    "combinatorics": _combinatorics,
    "number_theory": _number_theory,
    "geometry": _geometry,
}


def generate(seed: int = SEED) -> dict[str, list[dict[str, Any]]]:
    """Every split's task rows, families cycled in order, duplicates drawn again."""
    rng = random.Random(seed)
    names = list(FAMILIES)
    seen: set[str] = set()
    rows: list[dict[str, Any]] = []
    while len(rows) < sum(SPLITS.values()):
        family = names[len(rows) % len(names)]
        prompt, answer, difficulty = FAMILIES[family](rng)
        if prompt in seen:
            continue
        seen.add(prompt)
        metadata: dict[str, Any] = {"family": family, "difficulty": difficulty}
        if family in ANSWER_FORMS:
            metadata["answer_form"] = ANSWER_FORMS[family]
        rows.append(
            {"id": ID_FORMAT.format(len(rows)), "prompt": prompt, "answer": answer, "metadata": metadata}
        )
    splits: dict[str, list[dict[str, Any]]] = {}
    start = 0
    for split, size in SPLITS.items():
        splits[split] = rows[start : start + size]
        start += size
    return splits


def render(seed: int = SEED) -> dict[str, str]:
    """The JSONL text of each split file."""
    return {
        split: "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        for split, rows in generate(seed).items()
    }


def write(folder: Path = DATASETS_ROOT / "math", seed: int = SEED) -> list[Path]:
    """Write the split files into `folder`; returns their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for split, text in render(seed).items():
        path = folder / f"{split}.jsonl"
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--check", action="store_true", help="compare with the files on disk instead of writing"
    )
    args = parser.parse_args(argv)
    if args.check:
        stale = [
            split
            for split, text in render().items()
            if not (DATASETS_ROOT / "math" / f"{split}.jsonl").is_file()
            or (DATASETS_ROOT / "math" / f"{split}.jsonl").read_text(encoding="utf-8") != text
        ]
        print("up to date" if not stale else f"stale: {', '.join(stale)}")
        return 1 if stale else 0
    for path in write():
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
