"""Output of the session benchmark: the console tables, and the Sessions section of docs/benchmarks.md."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from _loadgen import (
    HammerResult,
)
from _profile import summarize
from _sessions_system import LOADGEN_CORE, REPO, SERVER_CORE
from _sessions_workload import HeldResult, LevelResult, Report
from rich.console import Console
from rich.table import Table

DOCS = REPO / "docs" / "benchmarks.md"


# Wide when piped (to a file or `tee`), so the tables keep one row per line.
console = Console(highlight=False, width=None if sys.stdout.isatty() else 180)

# design.md "Targets to benchmark": peers measured on this machine class (one server core), for context.
PEERS: list[tuple[str, str, str, str]] = [
    ("bare Starlette JSON echo, uvloop + httptools (the floor)", "5,582, 0.12 ms", "16,198", "14,439, 24 ms"),
    ("OpenEnv WebSocket sessions, uvloop + httptools", "2,239, 0.21 ms", "3,372", "2,901, 697 ms"),
    ("OpenEnv HTTP (stateless per request), uvloop + httptools", "3,107, 0.26 ms", "3,846", "1,661, 303 ms"),
    ("NeMo Gym resources server (run_webserver, Ray off)", "1,049, 0.63 ms", "930", "478, 653 ms"),
    ("a plain FastAPI app with a dict of sessions", "3,457, 0.20 ms", "6,001", "4,950, 78 ms"),
]


def fmt_errors(errors: Counter[str]) -> str:
    if not errors:
        return "0"
    return ", ".join(f"{count} x {kind}" for kind, count in errors.most_common())


def fmt_ms(value: float) -> str:
    return "n/a" if value != value else f"{value:.2f}"  # NaN check without importing math


# -- output ------------------------------------------------------------------------------------------


def print_machine(report: Report) -> None:
    m = report.machine
    console.rule("[bold]gym-server session benchmark")
    console.print(f"CPU      {m['cpu']}, {m['cores']} cores, {m['ram']} RAM")
    console.print(f"software Python {m['python']}, {m['kernel']}, {m['packages']}")
    console.print(f"code     git {m['git']} (working tree as it is)")
    console.print(f"date     {m['date']}, load average at start {m['load']}")
    console.print(
        "pinning  "
        + (
            f"server on core {SERVER_CORE}, load generator on core {LOADGEN_CORE}"
            if report.pinned
            else "[yellow]none: fewer than 2 cores, numbers are not comparable[/]"
        )
    )


def print_checks(report: Report) -> None:
    table = Table(title="load generator self-check against the live server")
    table.add_column("check")
    table.add_column("ok")
    table.add_column("detail", overflow="fold")
    for name, ok, detail in report.checks:
        table.add_row(name, "[green]yes[/]" if ok else "[red]NO[/]", "" if ok else detail)
    console.print(table)


def print_ceiling(report: Report) -> None:
    table = Table(title="load generator ceiling (GET, one connection per client)")
    columns = (
        "target",
        "clients",
        "req/s",
        "p50 ms",
        "p99 ms",
        "loadgen CPU",
        "CPU µs/req",
        "est. max req/s",
    )
    for name in (*columns, "errors"):
        table.add_column(name, justify="right" if name != "target" else "left")
    for row in report.ceiling:
        r = row.result
        p50, p99, _ = r.stats.summary()
        table.add_row(
            row.target,
            str(r.clients),
            f"{r.rate:,.0f}",
            fmt_ms(p50),
            fmt_ms(p99),
            f"{r.loadgen_cpu:.0%}",
            *_cpu_per_request(r),
            fmt_errors(r.stats.errors),
        )
    console.print(table)


def _cpu_per_request(r: HammerResult) -> tuple[str, str]:
    """The load generator's CPU cost per request, and the rate one core of it could drive at 100%."""
    if not r.requests or r.loadgen_cpu != r.loadgen_cpu:
        return "n/a", "n/a"
    per_request = r.loadgen_cpu * r.seconds / r.requests
    return f"{per_request * 1e6:.0f}", f"{1 / per_request:,.0f}"


def print_results(report: Report) -> None:
    args = report.args
    table = Table(
        title=f"episodes: create, {args.steps} steps, verify, delete ({args.duration:g} s per level)"
    )
    columns = (
        "clients",
        "episodes",
        "steps/s",
        "req/s",
        "step p50 ms",
        "step p99 ms",
        "create p50 ms",
        "close p50 ms",
        "close p99 ms",
        "errors",
        "server CPU",
        "server µs/req",
        "steps/s per server core",
        "loadgen CPU",
        "other load",
        "server RSS MB",
    )
    for name in columns:
        table.add_column(name, justify="right")
    for lv in report.levels:
        table.add_row(
            str(lv.clients),
            f"{lv.episodes:,}",
            f"{lv.steps / lv.seconds:,.0f}",
            f"{lv.requests / lv.seconds:,.0f}",
            fmt_ms(lv.p("step", 50)),
            fmt_ms(lv.p("step", 99)),
            fmt_ms(lv.p("create", 50)),
            fmt_ms(lv.p("delete", 50)),
            fmt_ms(lv.p("delete", 99)),
            fmt_errors(lv.errors),
            f"{lv.server_cpu:.0%}",
            f"{lv.server_us_per_request:.0f}",
            f"{lv.steps_per_server_core:,.0f}",
            f"{lv.loadgen_cpu:.0%}",
            f"{lv.other_cpu:.2f} cores",
            f"{lv.rss_before_mb:.0f} → {lv.rss_after_mb:.0f}",
        )
    console.print(table)
    if report.held:
        h = report.held
        held = Table(title=f"held sessions: {h.sessions:,} opened, then a sample stepped, then all closed")
        for name in ("opened", "open rate", "server live", "RSS MB", "over baseline", "per session"):
            held.add_column(name, justify="right")
        for name in ("sample stepped", "sample p50 ms", "closed", "RSS after close", "errors"):
            held.add_column(name, justify="right")
        held.add_row(*held_row(h))
        console.print(held)
    targets = Table(title="measured vs targets (issue 2, design.md) and the best peer in design.md")
    for name in ("metric", "measured", "issue 2 target", "design.md target", "best peer (design.md)"):
        targets.add_column(name)
    for row in target_rows(report):
        targets.add_row(*row)
    console.print(targets)
    peers = Table(title="peers from design.md (measured elsewhere on this machine class; context only)")
    for name in ("server", "1 client: steps/s, p50", "16 clients: steps/s", "256 clients: steps/s, p99"):
        peers.add_column(name)
    for peer in PEERS:
        peers.add_row(*peer)
    console.print(peers)
    console.print(
        f"[dim]load average at start {report.machine['load']}, at end {report.load_end}. The machine is "
        "shared: 'other load' is busy time on the two cores not used by the server or the load generator.[/]"
    )


def print_profile(path: Path) -> None:
    summary = summarize(path)
    console.print(f"py-spy: {summary.samples:,} samples of the server during the episode levels ({path})")
    for title, rows in (
        ("threads", summary.threads),
        ("self", summary.self_top),
        ("inclusive, below 40% (the shared roots left out)", summary.inclusive_top),
    ):
        table = Table(title=f"server hot spots: {title} samples")
        table.add_column("function")
        table.add_column("samples", justify="right")
        table.add_column("share", justify="right")
        for name, count in rows:
            table.add_row(name, f"{count:,}", f"{count / max(1, summary.samples):.1%}")
        console.print(table)


def held_row(h: HeldResult) -> list[str]:
    per_session_kb = h.over_baseline_mb * 1024 / h.opened if h.opened else float("nan")
    return [
        f"{h.opened:,}",
        f"{h.opened / h.open_seconds:,.0f}/s" if h.open_seconds else "n/a",
        f"{h.live_reported:,}" if h.live_reported is not None else "n/a",
        f"{h.rss_baseline_mb:.0f} → {h.rss_held_mb:.0f}",
        f"{h.over_baseline_mb:.1f} MB",
        f"{per_session_kb:.1f} KB",
        f"{h.sample_ok:,}/{h.sampled:,}",
        fmt_ms(h.sample_p50_ms),
        f"{h.closed:,}",
        f"{h.rss_closed_mb:.0f}",
        fmt_errors(h.errors),
    ]


def _level(report: Report, clients: int) -> LevelResult | None:
    return next((lv for lv in report.levels if lv.clients == clients), None)


def target_rows(report: Report) -> list[list[str]]:
    rows: list[list[str]] = []
    low = min(report.levels, key=lambda lv: lv.clients) if report.levels else None
    if low is not None:
        rows.append(
            [
                f"step p50 at {low.clients} client(s)",
                f"{fmt_ms(low.p('step', 50))} ms",
                "<= 1 ms",
                "<= 0.2 ms (1 client)",
                "0.12 ms (Starlette echo), 0.20 ms (FastAPI dict)",
            ]
        )
    if report.levels:
        best = max(report.levels, key=lambda lv: lv.steps / lv.seconds)
        rows.append(
            [
                "best steps/s",
                f"{best.steps / best.seconds:,.0f} ({best.clients} clients)",
                ">= 3,000 on 2 cores",
                "2x best peer at every level",
                "16,198 (Starlette echo); 6,001 (FastAPI dict, 16 clients)",
            ]
        )
    for clients, design, peer in (
        (16, ">= 7,700 (one core)", "6,001 (FastAPI dict)"),
        (256, "2x best peer; p99 <= 100 ms", "4,950, p99 78 ms (FastAPI dict)"),
    ):
        lv = _level(report, clients)
        if lv is not None:
            rows.append(
                [
                    f"steps/s at {clients} clients",
                    f"{lv.steps / lv.seconds:,.0f}, p99 {fmt_ms(lv.p('step', 99))} ms",
                    ">= 3,000",
                    design,
                    peer,
                ]
            )
    if report.held:
        h = report.held
        rows.append(
            [
                f"{h.sessions:,} open sessions",
                f"{h.opened:,} opened, {sum(h.errors.values())} errors, "
                f"{h.over_baseline_mb:.0f} MB over baseline",
                "10,000 without errors",
                "10,000 in <= 200 MB over baseline",
                "n/a",
            ]
        )
    return rows


def markdown_section(report: Report) -> str:
    """The "## Sessions" section of docs/benchmarks.md: method, machine, tables."""
    args, m = report.args, report.machine
    store = (
        "the store at `--database-url`" if args.database_url else "its SQLite store in a temporary directory"
    )
    busiest = max((lv.other_cpu for lv in report.levels), default=0.0)
    lines = [
        "## Sessions",
        "",
        " ".join(
            [
                "`benchmarks/sessions.py` starts `gym-server serve` (uvicorn + uvloop + httptools) as a",
                f"separate process pinned to core {SERVER_CORE}, with {store}, and drives it from",
                f"core {LOADGEN_CORE} with a raw-asyncio HTTP/1.1 keep-alive client",
                "(`benchmarks/_loadgen.py`, one connection per client). Each client loops over whole",
                "episodes of the trivial `counter`",
                f"environment: create, {args.steps} `add` steps, verify, delete. Each level runs",
                f"{args.warmup:g} s of warm-up, then {args.duration:g} s measured. Latency is per request,",
                "from writing it to reading the whole response. 'server CPU' is the server process's CPU",
                "time over the window (100% = its whole core); 'server CPU per request' and 'steps/s per",
                "server core' divide by it, so they hold up better than steps/s when other processes take",
                "part of the core. Reproduce with:",
            ]
        ),
        "",
        "```",
        "python benchmarks/sessions.py " + " ".join(report.args.argv),
        "```",
        "",
        "**Machine.** "
        + f"{m['cpu']}, {m['cores']} cores, {m['ram']} RAM; {m['kernel']}; Python {m['python']}; "
        + f"{m['packages']}; git {m['git']} (with the working tree as it was); {m['date']}. "
        + f"Load average {m['load']} at the start and {report.load_end} at the end; 'other load' is busy "
        + "time on the two cores used by neither the server nor the load generator"
        + (
            f" (up to {busiest:.2f} cores here: the machine was shared during the run, so the numbers "
            "are noisy)."
            if busiest > 0.1
            else "."
        ),
        "",
        f"### Episodes ({args.duration:g} s per level)",
        "",
        "| clients | episodes | steps/s | all req/s | step p50 | step p99 | create p50 | close p50 "
        "| close p99 | errors | "
        "server CPU | server CPU per request | steps/s per server core | loadgen CPU | other load "
        "| server RSS before → after |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for lv in report.levels:
        lines.append(
            f"| {lv.clients} | {lv.episodes:,} | {lv.steps / lv.seconds:,.0f} "
            f"| {lv.requests / lv.seconds:,.0f} "
            f"| {fmt_ms(lv.p('step', 50))} ms | {fmt_ms(lv.p('step', 99))} ms "
            f"| {fmt_ms(lv.p('create', 50))} ms "
            f"| {fmt_ms(lv.p('delete', 50))} ms | {fmt_ms(lv.p('delete', 99))} ms "
            f"| {fmt_errors(lv.errors)} | {lv.server_cpu:.0%} | {lv.server_us_per_request:.0f} µs "
            f"| {lv.steps_per_server_core:,.0f} | {lv.loadgen_cpu:.0%} "
            f"| {lv.other_cpu:.2f} cores | {lv.rss_before_mb:.0f} → {lv.rss_after_mb:.0f} MB |"
        )
    if report.held:
        h = report.held
        cells = held_row(h)
        lines += [
            "",
            f"### Held sessions ({h.sessions:,})",
            "",
            f"Opened with {min(args.held_concurrency, h.sessions)} concurrent connections, memory read from "
            "`VmRSS` after the store caught up, then a random sample stepped once each, one at a time, "
            "then all closed.",
            "",
            "| opened | open rate | live (server says) | server RSS | over baseline | per session "
            "| sample stepped | sample p50 | closed | RSS after close | errors |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
            "| " + " | ".join([*cells[:7], cells[7] + " ms", cells[8], cells[9] + " MB", *cells[10:]]) + " |",
        ]
    lines += [
        "",
        f"### Load generator ceiling ({args.ceiling_duration:g} s per level)",
        "",
        "The same client, issuing `GET` back to back, against a canned-response stub server on the server's",
        "core (its own ceiling) and against the gym server's cheapest route, `GET /healthz`. The episode",
        "numbers above are meaningful as long as they stay well below the stub row and the load",
        "generator's CPU stays below 100% of its core. 'est. max req/s' is the load generator's CPU time",
        "per request turned into the rate one full core of it could drive; the stub itself (one Python",
        "process on the server's core) usually saturates first.",
        "",
        "| target | clients | req/s | p50 | p99 | loadgen CPU | CPU per request | est. max req/s | errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in report.ceiling:
        r = row.result
        p50, p99, _ = r.stats.summary()
        per_request, estimate = _cpu_per_request(r)
        lines.append(
            f"| {row.target} | {r.clients} | {r.rate:,.0f} | {fmt_ms(p50)} ms | {fmt_ms(p99)} ms "
            f"| {r.loadgen_cpu:.0%} | {per_request} µs | {estimate} | {fmt_errors(r.stats.errors)} |"
        )
    lines += [
        "",
        "### Measured against the targets",
        "",
        "| metric | measured | issue 2 target | design.md target | best peer (design.md) |",
        "|---|---|---|---|---|",
        *("| " + " | ".join(row) + " |" for row in target_rows(report)),
        "",
        "Peers, as listed in design.md (measured elsewhere on this machine class, not by this script):",
        "",
        "| server | 1 client: steps/s, p50 | 16 clients: steps/s | 256 clients: steps/s, p99 |",
        "|---|---|---|---|",
        *("| " + " | ".join(peer) + " |" for peer in PEERS),
        "",
    ]
    return "\n".join(lines)


def write_docs(report: Report, path: Path = DOCS) -> None:
    """Replace the "## Sessions" section of docs/benchmarks.md (create the file if needed), keep the rest."""
    section = markdown_section(report)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            "# Benchmarks\n\nNumbers measured by the scripts under `benchmarks/`, each with the machine it "
            "ran on. Re-run a script with `--write-docs` to replace its section.\n\n" + section
        )
        return
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    start = end = None
    in_fence = False
    for index, line in enumerate(lines):
        if line.startswith("```"):
            in_fence = not in_fence
        if in_fence:
            continue
        if start is None and line.rstrip() == "## Sessions":
            start = index
        elif start is not None and line.startswith("## "):
            end = index
            break
    if start is None:
        new = text.rstrip("\n") + "\n\n" + section
    else:
        tail = "".join(lines[end:]) if end is not None else ""
        new = "".join(lines[:start]) + section + ("\n" + tail if tail else "")
    path.write_text(new)
