"""Verifier audits: read what earned a high score before training on it.

`build_audit` samples up to N stored trajectories of one environment (optionally one run) at random
offsets (a fixed seed samples the same rows), and gathers what an author needs to judge the verifier:

- the **score distribution**: summary statistics, a histogram over the observed range (rewards need not be
  in [0, 1]: `tool_call` scores −1 … 1), how many came back with a failure class (no signal), and the mean
  of every component;
- the **highest- and lowest-scored transcripts**, in full (long messages cut at 2,000 characters);
- **disagreement between verifiers** where several apply: for single-turn environments whose task answer
  is a plain reference (a string or number, or `{"answer": ...}`), the final answer is re-checked with the
  library's `math`, `numeric`, `exact` and `normalized` verifiers, and each is compared, pass against
  fail, with the stored verdict and with each other: an agreement table and the disagreeing transcripts.
  A verifier whose reference does not apply (a word for `numeric`) is left out for that row;
- the environment and verifier **versions** the sample was scored with (mixed versions suggest
  `gym-server reverify`).

`render_markdown` and `render_html` (self-contained: inline CSS and an inline SVG histogram, every
transcript HTML-escaped) turn it into a file; `write_report` picks by suffix.
"""

from __future__ import annotations

import html
import random
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import combinations
from pathlib import Path
from typing import Any

from gym_server.core.errors import GymError
from gym_server.sdk.registry import Registry
from gym_server.store.records import TrajectoryRecord, TrajectoryStatus
from gym_server.store.writer import TrajectoryStore
from gym_verifiers.format import final_answer
from gym_verifiers.math import math_match
from gym_verifiers.numeric import numeric_match
from gym_verifiers.result import VerifierResult
from gym_verifiers.text import exact_match, normalized_match

__all__ = [
    "AuditError",
    "AuditReport",
    "AuditRow",
    "build_audit",
    "render_html",
    "render_markdown",
    "write_report",
]

BINS = 10
MESSAGE_CHARS = 2_000
EXAMPLES = 5
STORED = "stored"


class AuditError(ValueError):
    """Nothing to audit (no stored trajectory matches), or a report path of an unknown kind."""


@dataclass(slots=True)
class AuditRow:
    """One sampled trajectory and, where they apply, the other verifiers' pass/fail verdicts."""

    record: TrajectoryRecord
    response: str | None = None  # the final assistant message's text
    answer: str | None = None  # the final answer extracted from it
    reference: str | None = None
    verdicts: dict[str, bool] = field(default_factory=dict)  # verifier -> passed; `stored` included

    @property
    def reward(self) -> float | None:
        return self.record.reward


@dataclass(slots=True)
class AuditReport:
    """Everything a report shows; built by `build_audit`, rendered by `render_markdown`/`render_html`."""

    env: str
    run: str | None
    available: int
    rows: list[AuditRow]
    top: int
    seed: int
    generated_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def sampled(self) -> int:
        return len(self.rows)

    @property
    def scored(self) -> list[AuditRow]:
        """Rows with a reward and no failure class: the training signal."""
        return [r for r in self.rows if r.reward is not None and not r.record.failure]

    @property
    def rewards(self) -> list[float]:
        return [r.reward for r in self.scored if r.reward is not None]

    def stats(self) -> dict[str, float]:
        values = sorted(self.rewards)
        if not values:
            return {}
        quartiles = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
        return {
            "mean": statistics.fmean(values),
            "std": statistics.pstdev(values),
            "min": values[0],
            "p25": quartiles[0],
            "median": quartiles[1],
            "p75": quartiles[2],
            "max": values[-1],
        }

    def histogram(self, bins: int = BINS) -> list[tuple[float, float, int]]:
        """(low, high, count) per bin over [min(0, lowest), max(1, highest)]; the last bin is closed."""
        values = self.rewards
        if not values:
            return []
        low, high = min(0.0, min(values)), max(1.0, max(values))
        width = (high - low) / bins
        counts = [0] * bins
        for value in values:
            counts[min(bins - 1, int((value - low) / width))] += 1
        return [(low + i * width, low + (i + 1) * width, counts[i]) for i in range(bins)]

    def component_means(self) -> dict[str, float]:
        sums: dict[str, float] = {}
        seen: Counter[str] = Counter()
        for row in self.scored:
            for name, value in row.record.components.items():
                sums[name] = sums.get(name, 0.0) + value
                seen[name] += 1
        return {name: sums[name] / seen[name] for name in sorted(sums)}

    def failures(self) -> Counter[str]:
        return Counter(r.record.failure for r in self.rows if r.record.failure)

    def unscored(self) -> int:
        return sum(1 for r in self.rows if r.reward is None)

    def versions(self) -> dict[str, Counter[str]]:
        return {
            "env": Counter(r.record.env_version for r in self.rows),
            "verifier": Counter(r.record.verifier_version or "-" for r in self.rows),
        }

    def extremes(self) -> tuple[list[AuditRow], list[AuditRow]]:
        """The `top` highest- and lowest-scored rows (ties broken by id, so the report is stable)."""
        ranked = sorted(self.scored, key=lambda r: (-(r.reward or 0.0), r.record.id))
        lowest = sorted(self.scored, key=lambda r: (r.reward or 0.0, r.record.id))
        return ranked[: self.top], lowest[: self.top]

    def verifiers(self) -> list[str]:
        names = {name for row in self.rows for name in row.verdicts}
        return sorted(names, key=lambda name: (name != STORED, name))

    def agreement(self) -> dict[tuple[str, str], tuple[int, int]]:
        """(agreeing, compared) per pair of verifiers, over the rows where both gave a verdict."""
        table: dict[tuple[str, str], tuple[int, int]] = {}
        for first, second in combinations(self.verifiers(), 2):
            both = [r for r in self.rows if first in r.verdicts and second in r.verdicts]
            agree = sum(1 for r in both if r.verdicts[first] == r.verdicts[second])
            table[(first, second)] = (agree, len(both))
        return table

    def disagreements(self) -> list[AuditRow]:
        return [r for r in self.rows if len(set(r.verdicts.values())) > 1]


async def build_audit(
    url: str,
    env: str,
    *,
    run: str | None = None,
    n: int = 200,
    top: int = 3,
    seed: int = 0,
    registry: Registry | None = None,
) -> AuditReport:
    """Sample up to `n` stored trajectories of `env` (and `run`) and re-check their answers where possible.

    Raises:
        AuditError: no stored trajectory of `env` matches.
        StoreUnavailable: the database does not answer.
    """
    store = TrajectoryStore(url)
    await store.start()
    try:
        available = await store.count(env=env, run=run)
        if not available:
            where = f" in run {run!r}" if run else ""
            raise AuditError(f"no stored trajectories of {env!r}{where}")
        offsets = sorted(random.Random(seed).sample(range(available), min(n, available)))
        records = [
            page[0] for k in offsets if (page := await store.list(env=env, run=run, offset=k, limit=1))
        ]
    finally:
        await store.stop()
    registry = registry if registry is not None else Registry.discover()
    rows = [await _audit_row(record, registry) for record in records]
    return AuditReport(env, run, available, rows, top, seed)


async def _audit_row(record: TrajectoryRecord, registry: Registry) -> AuditRow:
    row = AuditRow(record)
    if record.status is TrajectoryStatus.LIVE or record.reward is None or record.failure:
        return row
    reference = _reference(registry, record)
    content = _final_content(record.messages)
    if reference is None or content is None:
        return row
    row.reference, row.response, row.answer = reference, content, final_answer(content).text
    row.verdicts[STORED] = record.reward >= 1.0
    checks: dict[str, VerifierResult] = {
        "math": await math_match(content, reference),
        "numeric": numeric_match(content, reference),
        "exact": exact_match(row.answer or content, reference),
        "normalized": normalized_match(row.answer or content, reference),
    }
    for name, result in checks.items():
        if result.failure is None:  # an inapplicable reference (a word for `numeric`) gives no verdict
            row.verdicts[name] = result.passed
    return row


def _reference(registry: Registry, record: TrajectoryRecord) -> str | None:
    """The task's plain reference answer when the environment is single-turn and has one."""
    if record.env not in registry:
        return None
    entry = registry.get(record.env)
    if entry.cls.multi_turn:
        return None
    try:
        task = entry.task(record.task_id)
    except GymError:
        return None
    answer = task.answer
    if isinstance(answer, Mapping):
        answer = answer.get("answer")
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
        return None
    return str(answer)


def _final_content(messages: Sequence[Mapping[str, Any]]) -> str | None:
    for message in reversed(messages):
        if message.get("role") == "assistant":
            content = message.get("content")
            return content if isinstance(content, str) else None
    return None


# -- rendering ----------------------------------------------------------------------------------------


def write_report(report: AuditReport, path: Path) -> None:
    """Write Markdown for `.md`/`.markdown`, HTML for `.html`/`.htm`.

    Raises:
        AuditError: any other suffix.
    """
    suffix = path.suffix.lower()
    if suffix in {".md", ".markdown"}:
        text = render_markdown(report)
    elif suffix in {".html", ".htm"}:
        text = render_html(report)
    else:
        raise AuditError(f"report {path.name!r}: use a .md or .html file name")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _header_lines(report: AuditReport) -> list[str]:
    run = f", run `{report.run}`" if report.run else ""
    lines = [
        f"Sampled {report.sampled} of {report.available} stored trajectories of `{report.env}`{run} "
        f"(seed {report.seed}), {report.generated_at:%Y-%m-%d %H:%M} UTC.",
        f"Scored: {len(report.scored)}; never verified: {report.unscored()}; with a failure class "
        f"(no training signal, left out below): {sum(report.failures().values())}.",
    ]
    versions = report.versions()
    if len(versions["verifier"]) > 1:
        lines.append(
            f"**Scored by {len(versions['verifier'])} verifier versions**: run "
            f"`gym-server reverify --env {report.env}` to put them on the current one."
        )
    return lines


def _bar(count: int, most: int, width: int = 40) -> str:
    return "█" * max(1 if count else 0, round(width * count / most)) if most else ""


def render_markdown(report: AuditReport) -> str:
    """The report as Markdown."""
    out = [f"# Verifier audit: `{report.env}`", "", *_header_lines(report), "", "## Score distribution", ""]
    stats = report.stats()
    if stats:
        out += ["| " + " | ".join(stats) + " |", "|" + "---|" * len(stats)]
        out += ["| " + " | ".join(f"{value:.4g}" for value in stats.values()) + " |", ""]
        bins = report.histogram()
        most = max(count for _, _, count in bins)
        lines = [f"[{lo:6.3f}, {hi:6.3f}) {count:6d} {_bar(count, most)}" for lo, hi, count in bins]
        lines[-1] = lines[-1].replace(")", "]", 1)  # the last bin holds its upper bound
        out += ["```", *lines]
        out += ["```", ""]
    else:
        out += ["No scored trajectory in the sample.", ""]
    failures = report.failures()
    if failures:
        out += ["Failure classes: " + ", ".join(f"`{k}` {v}" for k, v in failures.most_common()), ""]
    means = report.component_means()
    if means:
        out += ["| component | mean |", "|---|---|"] + [f"| `{k}` | {v:.4g} |" for k, v in means.items()]
        out.append("")
    out += _markdown_agreement(report)
    highest, lowest = report.extremes()
    for title, rows in (("Highest-scored transcripts", highest), ("Lowest-scored transcripts", lowest)):
        out += [f"## {title}", ""]
        for row in rows:
            out += _markdown_transcript(row)
    versions = report.versions()
    out += ["## Versions", ""]
    for kind, counter in versions.items():
        out.append(f"- {kind}: " + ", ".join(f"`{k}` ({v})" for k, v in counter.most_common()))
    return "\n".join(out) + "\n"


def _markdown_agreement(report: AuditReport) -> list[str]:
    out = ["## Agreement between verifiers", ""]
    pairs = report.agreement()
    if not pairs:
        return [*out, "No second verifier applies to this environment's answers.", ""]
    out += ["| verifiers | agree | compared | rate |", "|---|---|---|---|"]
    for (first, second), (agree, compared) in pairs.items():
        rate = f"{agree / compared:.1%}" if compared else "-"
        out.append(f"| `{first}` vs `{second}` | {agree} | {compared} | {rate} |")
    out.append("")
    disagreements = report.disagreements()
    out += [f"{len(disagreements)} sampled trajectories where the verifiers disagree.", ""]
    for row in disagreements[:EXAMPLES]:
        verdicts = ", ".join(f"{k} {'pass' if v else 'fail'}" for k, v in row.verdicts.items())
        out.append(
            f"- `{row.record.id}` task `{row.record.task_id}`: response {_md_code(row.response)} "
            f"(answer {_md_code(row.answer)}) vs reference {_md_code(row.reference)}: {verdicts}"
        )
    return [*out, ""]


def _md_code(text: str | None) -> str:
    shown = (text or "")[:120].replace("\n", " ")
    ticks = "``" if "`" in shown else "`"
    return f"{ticks} {shown} {ticks}" if shown else "(none)"


def _markdown_transcript(row: AuditRow) -> list[str]:
    record = row.record
    out = [f"### `{record.id}`: reward {row.reward:.4g}, task `{record.task_id}`", ""]
    if record.components:
        out += ["Components: " + ", ".join(f"`{k}` {v:.3g}" for k, v in record.components.items()), ""]
    explanation = record.verify_info.get("explanation")
    if explanation:
        out += [f"Verifier: {str(explanation)[:300]}", ""]
    body = "\n\n".join(_message_text(m) for m in record.messages)
    fence = "`" * max(3, _longest_backtick_run(body) + 1)
    return [*out, fence + "text", body, fence, ""]


def _message_text(message: Mapping[str, Any]) -> str:
    role = str(message.get("role", "?"))
    parts: list[str] = []
    content = message.get("content")
    if isinstance(content, str) and content:
        parts.append(content if len(content) <= MESSAGE_CHARS else content[:MESSAGE_CHARS] + " [...]")
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, Mapping) else None
        function = function if isinstance(function, Mapping) else {}
        parts.append(f"-> {function.get('name', '?')}({str(function.get('arguments', ''))[:500]})")
    return f"[{role}] " + ("\n".join(parts) if parts else "(empty)")


def _longest_backtick_run(text: str) -> int:
    longest = current = 0
    for ch in text:
        current = current + 1 if ch == "`" else 0
        longest = max(longest, current)
    return longest


_CSS = """body{font:14px/1.45 system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}
th:first-child,td:first-child{text-align:left}pre{background:#f6f6f6;padding:.8em;overflow-x:auto;
white-space:pre-wrap;word-break:break-word}.warn{color:#a40}svg text{font:11px sans-serif}"""


def render_html(report: AuditReport) -> str:
    """The report as one self-contained HTML page (no scripts, no external resources)."""
    e = html.escape
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>Verifier audit: {e(report.env)}</title><style>{_CSS}</style></head><body>",
        f"<h1>Verifier audit: <code>{e(report.env)}</code></h1>",
    ]
    parts += [f"<p>{_md_inline(line)}</p>" for line in _header_lines(report)]
    parts.append("<h2>Score distribution</h2>")
    stats = report.stats()
    if stats:
        parts.append(_html_table(list(stats), [[f"{value:.4g}" for value in stats.values()]]))
        parts.append(_svg_histogram(report.histogram()))
    else:
        parts.append("<p>No scored trajectory in the sample.</p>")
    means = report.component_means()
    if means:
        parts.append(_html_table(["component", "mean"], [[k, f"{v:.4g}"] for k, v in means.items()]))
    parts.append("<h2>Agreement between verifiers</h2>")
    pairs = report.agreement()
    if pairs:
        rows = [
            [f"{a} vs {b}", str(agree), str(n), f"{agree / n:.1%}" if n else "-"]
            for (a, b), (agree, n) in pairs.items()
        ]
        parts.append(_html_table(["verifiers", "agree", "compared", "rate"], rows))
        for row in report.disagreements()[:EXAMPLES]:
            verdicts = ", ".join(f"{k} {'pass' if v else 'fail'}" for k, v in row.verdicts.items())
            parts.append(
                f"<p><code>{e(row.record.id)}</code>: response <code>{e((row.response or '')[:120])}</code>"
                f" (answer <code>{e((row.answer or '')[:120])}</code>) vs reference "
                f"<code>{e((row.reference or '')[:120])}</code>: {e(verdicts)}</p>"
            )
    else:
        parts.append("<p>No second verifier applies to this environment's answers.</p>")
    highest, lowest = report.extremes()
    for title, chosen in (("Highest-scored transcripts", highest), ("Lowest-scored transcripts", lowest)):
        parts.append(f"<h2>{title}</h2>")
        for row in chosen:
            record = row.record
            heading = f"<code>{e(record.id)}</code>: reward {row.reward:.4g}"
            parts.append(f"<h3>{heading}, task <code>{e(record.task_id)}</code></h3>")
            if record.components:
                parts.append(
                    "<p>" + ", ".join(f"{e(k)} {v:.3g}" for k, v in record.components.items()) + "</p>"
                )
            explanation = record.verify_info.get("explanation")
            if explanation:
                parts.append(f"<p>Verifier: {e(str(explanation)[:300])}</p>")
            body = "\n\n".join(_message_text(m) for m in record.messages)
            parts.append(f"<pre>{e(body)}</pre>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _md_inline(line: str) -> str:
    """Escape, then render the header lines' `code` and **bold** spans."""
    escaped = html.escape(line)
    pieces = escaped.split("`")
    escaped = "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(pieces))
    pieces = escaped.split("**")
    return "".join(f"<strong class='warn'>{p}</strong>" if i % 2 else p for i, p in enumerate(pieces))


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    e = html.escape
    head = "".join(f"<th>{e(cell)}</th>" for cell in header)
    body = "".join("<tr>" + "".join(f"<td>{e(cell)}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _svg_histogram(bins: list[tuple[float, float, int]], width: int = 640, height: int = 200) -> str:
    if not bins:
        return ""
    most = max(count for _, _, count in bins) or 1
    slot = width / len(bins)
    bars = []
    for i, (low, high, count) in enumerate(bins):
        bar = 0 if not count else max(1.0, (height - 30) * count / most)
        x, y = i * slot + 2, height - 20 - bar
        middle = x + (slot - 4) / 2
        bars.append(
            f"<rect x='{x:.1f}' y='{y:.1f}' width='{slot - 4:.1f}' height='{bar:.1f}' fill='#4a7'>"
            f"<title>[{low:.3f}, {high:.3f}): {count}</title></rect>"
            f"<text x='{middle:.1f}' y='{height - 6}' text-anchor='middle'>{low:.2f}</text>"
            f"<text x='{middle:.1f}' y='{max(10.0, y - 3):.1f}' text-anchor='middle'>{count}</text>"
        )
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' role='img' "
        f"aria-label='score histogram'>{''.join(bars)}</svg>"
    )
