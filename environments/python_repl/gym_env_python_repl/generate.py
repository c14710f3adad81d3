"""Generate the `python_repl` tasks: small data-analysis questions over CSV files, and numeric puzzles.

Every task is built from a seeded `random.Random`, so the files are reproducible byte for byte; the
answer is computed here, in plain Python, from the same data the model will see. Data files travel in
the task's public metadata (`files`: name -> text) and are written to the session's work dir when the
episode starts. Answers are `{"value": ..., "kind": "int" | "float" | "text", "tolerance": ...}`.

    python environments/python_repl/gym_env_python_repl/generate.py      # writes
    datasets/gym_datasets/python_repl/{train,validation}.jsonl
"""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

from gym_server.sdk.tasks import DATASETS_ROOT

OUT = DATASETS_ROOT / "python_repl"
REGIONS = ["north", "south", "east", "west", "central"]
PRODUCTS = ["anvil", "bolt", "cog", "drill", "easel", "funnel"]
Task = dict[str, Any]


def _sales(rng: random.Random) -> tuple[list[dict[str, Any]], str]:
    rows = []
    for order in range(1, rng.randint(40, 80) + 1):
        rows.append(
            {
                "order_id": order,
                "region": rng.choice(REGIONS),
                "product": rng.choice(PRODUCTS),
                "units": rng.randint(1, 40),
                "unit_price": round(rng.uniform(2, 90), 2),
                "month": rng.randint(1, 12),
            }
        )
    header = "order_id,region,product,units,unit_price,month"
    lines = [header] + [",".join(str(row[key]) for key in header.split(",")) for row in rows]
    return rows, "\n".join(lines) + "\n"


def _csv_task(rng: random.Random, index: int) -> Task:
    rows, text = _sales(rng)
    kind = index % 5
    region, product = rng.choice(REGIONS), rng.choice(PRODUCTS)
    if kind == 0:
        value = round(sum(r["units"] * r["unit_price"] for r in rows if r["region"] == region), 2)
        question = f"What is the total revenue (units × unit_price) of all orders in region '{region}'?"
        answer = {"value": value, "kind": "float", "tolerance": 0.01}
        hint = "Round to 2 decimals."
    elif kind == 1:
        totals: defaultdict[str, int] = defaultdict(int)
        for r in rows:
            totals[r["region"]] += r["units"]
        best = max(sorted(totals), key=lambda name: totals[name])
        question = "Which region sold the most units in total? (If tied, the alphabetically first.)"
        answer, hint = {"value": best, "kind": "text"}, "Answer with the region name."
    elif kind == 2:
        threshold = rng.randint(10, 30)
        value_int = sum(r["units"] > threshold for r in rows)
        question = f"How many orders have more than {threshold} units?"
        answer, hint = {"value": value_int, "kind": "int"}, "Answer with an integer."
    elif kind == 3:
        prices = [r["unit_price"] for r in rows if r["product"] == product] or [0.0]
        value = round(sum(prices) / len(prices), 2)
        question = f"What is the average unit_price of product '{product}' (0 if it never appears)?"
        answer, hint = {"value": value, "kind": "float", "tolerance": 0.01}, "Round to 2 decimals."
    else:
        counts = Counter(r["product"] for r in rows if r["month"] <= 6)
        best = min(counts, key=lambda name: (-counts[name], name)) if counts else "none"
        question = "Which product has the most orders in months 1 to 6? (If tied, the alphabetically first.)"
        answer, hint = {"value": best, "kind": "text"}, "Answer with the product name."
    prompt = f"The file `sales.csv` in the working directory holds {len(rows)} orders. {question} {hint}"
    return {"prompt": prompt, "answer": answer, "metadata": {"family": "csv", "files": {"sales.csv": text}}}


def _primes_below(limit: int) -> int:
    sieve = bytearray([1]) * limit
    sieve[0:2] = b"\x00\x00"
    for n in range(2, int(limit**0.5) + 1):
        if sieve[n]:
            sieve[n * n :: n] = bytearray(len(range(n * n, limit, n)))
    return sum(sieve)


def _collatz(n: int) -> int:
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


def _lis(values: list[int]) -> int:
    import bisect

    tails: list[int] = []
    for value in values:
        at = bisect.bisect_left(tails, value)
        tails[at : at + 1] = [value]
    return len(tails)


def _puzzle_task(rng: random.Random, index: int) -> Task:
    kind = index % 6
    files: dict[str, str] = {}
    if kind == 0:
        limit = rng.randint(10_000, 200_000)
        question, value = f"How many prime numbers are smaller than {limit}?", _primes_below(limit)
    elif kind == 1:
        base, power = rng.randint(2, 9), rng.randint(50, 400)
        question = f"What is the sum of the decimal digits of {base}^{power}?"
        value = sum(int(d) for d in str(base**power))
    elif kind == 2:
        start = rng.randint(1_000, 1_000_000)
        question = f"How many steps does the Collatz sequence starting at {start} take to reach 1?"
        value = _collatz(start)
    elif kind == 3:
        n, modulus = rng.randint(100, 5_000), rng.choice([1_000_007, 998_244_353, 10**9 + 7])
        a, b = 0, 1
        for _ in range(n):
            a, b = b, a + b
        question, value = (
            f"What is F({n}) mod {modulus}, where F(0)=0, F(1)=1 are the Fibonacci numbers?",
            a % modulus,
        )
    elif kind == 4:
        n = rng.randint(20, 60)
        ways = [1] + [0] * n
        for total in range(1, n + 1):
            ways[total] = sum(ways[total - step] for step in (1, 2, 3) if total >= step)
        question = (
            f"In how many ways can {n} be written as an ordered sum of 1s, 2s and 3s? Give it mod 1000000007."
        )
        value = ways[n] % 1_000_000_007
    else:
        numbers = [rng.randint(0, 999) for _ in range(rng.randint(200, 600))]
        files["numbers.txt"] = "\n".join(map(str, numbers)) + "\n"
        question = (
            "The file `numbers.txt` holds one integer per line. "
            "How long is its longest strictly increasing subsequence?"
        )
        value = _lis(numbers)
    prompt = f"{question} Answer with an integer."
    metadata: dict[str, Any] = {"family": "puzzle", "files": files}
    return {"prompt": prompt, "answer": {"value": value, "kind": "int"}, "metadata": metadata}


def generate(count: int = 160, seed: int = 20_240_601) -> list[Task]:
    rng = random.Random(seed)
    makers: list[Callable[[random.Random, int], Task]] = [_csv_task, _puzzle_task]
    tasks = []
    for index in range(count):
        task = makers[index % 2](rng, index // 2)
        tasks.append({"id": f"python_repl-{index:04d}", **task})
    return tasks


def main() -> None:
    tasks = generate()
    OUT.mkdir(parents=True, exist_ok=True)
    splits = {"train": tasks[:128], "validation": tasks[128:]}
    for split, rows in splits.items():
        with (OUT / f"{split}.jsonl").open("w", encoding="utf-8") as out:
            for row in rows:
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {len(tasks)} tasks to {OUT}")


if __name__ == "__main__":
    main()
