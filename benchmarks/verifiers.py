"""Verifier benchmark: latency (p50, p99) and throughput of each verifier at concurrency 1 and 32.

What it measures, and how (issue 4 "Benchmark"; design.md target: math verify p50 <= 2 ms):

* Each verifier scores a fixed, mixed set of realistic inputs (right, wrong, hedged, malformed answers)
  in a loop. A call's latency is measured around the call and its `await` (sync verifiers are called
  inside the coroutine, as an environment's `verify()` calls them): for an async verifier at concurrency
  32 it includes the time the call waits for the loop or a worker, what a session sees under load; a
  sync verifier holds the loop while it runs, so its latency is its own cost and the load shows in
  throughput.
* Concurrency C is C coroutines on one event loop, each calling back to back, for a bounded number of
  calls (`--calls`) and at most `--seconds` of wall time, after a warm-up. Pure-Python verifiers share
  one core through the GIL, so their throughput stays flat with C while latency grows; `math` runs in the
  killable worker pool (`gym_verifiers.math`, one worker per usable CPU, at most 4), so its
  throughput scales with the pool.
* The LLM judge is not here: its cost is the judge model's, not the library's.

Run `python benchmarks/verifiers.py` for the table, `--quick` for a smoke run, and `--write-docs` to
replace the "## Verifiers" section of docs/benchmarks.md (other sections are kept).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import inspect
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from gym_verifiers import choice, json_checks, numeric, text, tool_call
from gym_verifiers import format as fmt
from gym_verifiers.math import close_shared_pool, math_match, shared_pool
from gym_verifiers.rubric import Criterion, Rubric

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs" / "benchmarks.md"
SECTION = "## Verifiers"
LEVELS = (1, 32)
WARM_UP = 8  # calls before timing: lazy imports, caches, the math pool's workers
MATH_TARGET_MS = 2.0

Call = Callable[[str], Any]

ANSWERS = [
    "Adding them gives \\boxed{42}.",
    "<answer>42</answer>",
    "The answer is 41.",
    "\\boxed{41} or \\boxed{42}",
    "I am not sure.",
    "<think>6 x 7</think><answer>42</answer>",
]
MATH_FORMS = (
    "So the result is \\boxed{{\\frac{{{a}}}{{{b}}}}}.",  # right: 3i/4i = 3/4
    "\\boxed{{0.75{i}}}",  # wrong
    "The answer is ${a}/{b}$.",  # right, as a phrase
    "\\boxed{{\\frac{{{i}}}{{{b}}}}}",  # wrong
    "\\boxed{{{i}}} or \\boxed{{0.75}}",  # hedged: refused before any worker
)


def math_answers(count: int) -> list[str]:
    """`count` distinct answers: math-verify's parse is cached per worker, and real answers rarely repeat."""
    return [MATH_FORMS[n % len(MATH_FORMS)].format(i=n, a=3 * n, b=4 * n) for n in range(1, count + 1)]


SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
EXPECTED_CALLS = [{"name": "get_weather", "arguments": {"city": "Paris", "units": "celsius"}}]
TOOL_MESSAGES: list[Any] = [
    {
        "role": "assistant",
        "tool_calls": [
            {"function": {"name": "get_weather", "arguments": '{"city": "Paris", "units": "celsius"}'}}
        ],
    },
    {
        "role": "assistant",
        "content": '<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_call>',
    },
    {"role": "assistant", "content": "I cannot call tools."},
]
RUBRIC = Rubric(
    [
        Criterion.gate("format", fmt.answer_tag_format),
        Criterion("correct", partial(numeric.numeric_match, reference="42")),
    ]
)


def verifiers(calls: int) -> dict[str, tuple[Call, list[Any]]]:
    """name -> (call, inputs): what each row of the table measures; enough distinct math answers for every
    call of every level and the warm-up, so none is answered from a cache."""
    return {
        "text.exact_match": (partial(text.exact_match, reference="42"), ANSWERS),
        "text.normalized_match": (partial(text.normalized_match, reference="forty-two"), ANSWERS),
        "numeric.numeric_match": (partial(numeric.numeric_match, reference="42"), ANSWERS),
        "choice.choice_match": (
            partial(choice.choice_match, reference="B"),
            [*ANSWERS, "Answer: B", "(A) or (B)"],
        ),
        "format.answer_tag_format": (fmt.answer_tag_format, ANSWERS),
        "format.think_format": (fmt.think_format, ANSWERS),
        "json_checks.json_schema_match": (
            partial(json_checks.json_schema_match, schema=SCHEMA),
            ['{"city": "Paris"}', '```json\n{"town": 1}\n```', "nope", '{"city": 3}'],
        ),
        "tool_call.verify_tool_calls": (
            partial(tool_call.verify_tool_calls, expected=EXPECTED_CALLS),
            TOOL_MESSAGES,
        ),
        "rubric (gate + numeric)": (RUBRIC.score, ANSWERS),
        "math.math_match (worker pool)": (
            partial(math_match, reference="\\frac{3}{4}"),
            math_answers(len(LEVELS) * calls + WARM_UP),
        ),
    }


@dataclass(frozen=True, slots=True)
class Row:
    verifier: str
    concurrency: int
    calls: int
    seconds: float
    p50_ms: float
    p99_ms: float

    @property
    def per_second(self) -> float:
        return self.calls / self.seconds if self.seconds else 0.0


def percentile(ordered: list[float], q: float) -> float:
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


async def measure(
    name: str, call: Call, inputs: list[Any], concurrency: int, calls: int, seconds: float, start: int = 0
) -> Row:
    """`calls` calls (fewer if `seconds` run out) spread over `concurrency` coroutines."""
    latencies: list[float] = []
    deadline = 0.0  # set after the warm-up
    next_index = start
    stop = start + calls

    async def one(value: Any) -> None:
        started = time.perf_counter()
        result = call(value)
        if inspect.isawaitable(result):
            result = await result
        latencies.append(time.perf_counter() - started)
        if not 0.0 <= float(getattr(result, "score", 0.0)) <= 1.0:  # sanity: a verifier stays in range
            raise AssertionError(f"{name} scored {result!r}")

    async def worker() -> None:
        nonlocal next_index
        while next_index < stop and time.perf_counter() < deadline:
            value = inputs[next_index % len(inputs)]
            next_index += 1
            await one(value)
            await asyncio.sleep(0)  # let the other coroutines in, as a server's loop would

    for value in inputs[-WARM_UP:]:  # the end of the list: the timed calls start at `start`
        await one(value)
    latencies.clear()
    started = time.perf_counter()
    deadline = started + seconds
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    ordered = sorted(latencies)
    return Row(
        name,
        concurrency,
        len(ordered),
        elapsed,
        percentile(ordered, 0.5) * 1e3,
        percentile(ordered, 0.99) * 1e3,
    )


async def run(args: argparse.Namespace) -> list[Row]:
    rows: list[Row] = []
    specs = verifiers(args.calls)
    chosen = {name: spec for name, spec in specs.items() if not args.only or args.only in name}
    for name, (call, inputs) in chosen.items():
        for index, level in enumerate(LEVELS):
            row = await measure(name, call, inputs, level, args.calls, args.seconds, start=index * args.calls)
            rows.append(row)
    return rows


def machine() -> dict[str, str]:
    def first(path: str, pattern: str) -> str | None:
        try:
            found = re.search(pattern, Path(path).read_text(), re.MULTILINE)
        except OSError:
            return None
        return found.group(1).strip() if found else None

    mem_kb = first("/proc/meminfo", r"^MemTotal:\s+(\d+)")
    git = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    versions = []
    for package in ("math-verify", "sympy", "jsonschema"):
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            continue
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    return {
        "cpu": first("/proc/cpuinfo", r"^model name\s*:\s*(.+)$") or platform.processor() or "?",
        "cores": str(os.cpu_count()),
        "ram": f"{int(mem_kb) / 1024 / 1024:.1f} GiB" if mem_kb else "?",
        "python": platform.python_version(),
        "kernel": f"{platform.system()} {platform.release()}",
        "packages": ", ".join(versions),
        "math pool": f"{shared_pool().size} workers",
        "git": git or "?",
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load": " / ".join(load),
    }


def _fmt_ms(value: float) -> str:
    return f"{value:.3f} ms" if value < 10 else f"{value:.1f} ms"


def table_rows(rows: list[Row]) -> list[list[str]]:
    return [
        [
            r.verifier,
            str(r.concurrency),
            f"{r.calls:,}",
            _fmt_ms(r.p50_ms),
            _fmt_ms(r.p99_ms),
            f"{r.per_second:,.0f}",
        ]
        for r in rows
    ]


HEADER = ["verifier", "concurrency", "calls", "p50", "p99", "calls/s"]


def markdown(rows: list[Row], info: dict[str, str], args: argparse.Namespace) -> str:
    math_rows = [r for r in rows if r.verifier.startswith("math.") and r.concurrency == 1]
    lines = [
        SECTION,
        "",
        "`benchmarks/verifiers.py` calls each verifier of the library on a fixed mix of right, wrong, "
        "hedged and malformed answers, from C coroutines on one event loop (C = 1 and 32), "
        f"{args.calls:,} calls per level at most ({args.seconds:g} s at most) after a warm-up pass. "
        "Latency is per call, around its `await`: for the async ones (the rubric, `math_match`) at "
        "concurrency 32 it includes waiting for the loop or a math worker; a synchronous verifier holds the "
        "loop while it runs, so its latency is its own cost and the load shows in calls/s. Pure-Python "
        "verifiers share one core through the GIL; `math_match` runs in the killable worker pool, so it "
        "scales with the pool. Reproduce with:",
        "",
        "```",
        "python benchmarks/verifiers.py --write-docs",
        "```",
        "",
        "**Machine.** "
        + "; ".join(f"{key} {value}" for key, value in info.items() if key not in {"load"})
        + f". Load average {info.get('load', '?')} at the start (the machine is shared: numbers are noisy).",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    lines += ["| " + " | ".join(cells) + " |" for cells in table_rows(rows)]
    if math_rows:
        p50 = math_rows[0].p50_ms
        verdict = "met" if p50 <= MATH_TARGET_MS else "not met"
        lines += [
            "",
            f"Target: math verify p50 <= {MATH_TARGET_MS:g} ms at concurrency 1: {_fmt_ms(p50)}, {verdict}.",
        ]
    return "\n".join(lines) + "\n"


def write_docs(section: str, path: Path = DOCS) -> None:
    """Replace the `## Verifiers` section (up to the next `## ` heading) or append it; keep the rest."""
    current = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.MULTILINE | re.DOTALL)
    if pattern.search(current):
        updated = pattern.sub(lambda _: section + "\n", current, count=1)
    else:
        updated = current.rstrip("\n") + "\n\n" + section
    path.write_text(updated.rstrip("\n") + "\n", encoding="utf-8")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=5_000, help="calls per verifier and level at most")
    parser.add_argument("--seconds", type=float, default=5.0, help="wall time per verifier and level at most")
    parser.add_argument("--only", default="", help="only verifiers whose name contains this")
    parser.add_argument("--quick", action="store_true", help="200 calls, 1 s per level: a smoke run")
    parser.add_argument("--write-docs", action="store_true", help=f"replace '{SECTION}' in {DOCS.name}")
    args = parser.parse_args(argv)
    if args.quick:
        args.calls, args.seconds = 200, 1.0
    if args.calls < 1 or args.seconds <= 0:
        parser.error("--calls must be >= 1 and --seconds > 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    console = Console()
    try:
        info = machine()
        rows = asyncio.run(run(args))
    finally:
        close_shared_pool()
    console.print("Machine: " + "; ".join(f"{k} {v}" for k, v in info.items()))
    table = Table(*HEADER, title="verifiers")
    for cells in table_rows(rows):
        table.add_row(*cells)
    console.print(table)
    if args.write_docs:
        write_docs(markdown(rows, info, args))
        console.print(f"wrote the '{SECTION}' section of {DOCS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
