"""Verifier audits: sampling stored trajectories, the score distribution, extremes, disagreement between
verifiers, and the Markdown and HTML reports, from the library and from `gym-server audit`."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gym_env_counter.env import CounterEnv
from gym_env_math.env import MathEnv
from gym_server.cli import rescore
from gym_server.scoring.audit import (
    AuditError,
    AuditReport,
    build_audit,
    render_html,
    render_markdown,
    write_report,
)
from gym_server.sdk.registry import Registry
from gym_server.store.records import TrajectoryRecord, TrajectoryStatus
from gym_server.store.writer import TrajectoryStore
from gym_verifiers.math import close_shared_pool

REGISTRY = Registry([MathEnv, CounterEnv])
TASK = "math-00000"  # (30 + 25) x 29 - 26 = 1569


@pytest.fixture(scope="module", autouse=True)
def _close_math_pool() -> Iterator[None]:
    yield
    close_shared_pool()


async def math_record(content: str, *, run: str = "audit", reward: float | None = None) -> TrajectoryRecord:
    """A math trajectory as the server would store it; `reward` overrides the score (a loose old verifier)."""
    entry = REGISTRY.get("math")
    env = entry.cls(entry.task(TASK), 0)
    await env.reset()
    await env.step({"role": "assistant", "content": content})
    result = await env.verify()
    return TrajectoryRecord(
        id=uuid.uuid4().hex,
        run=run,
        env="math",
        env_version=entry.version,
        task_id=TASK,
        seed=0,
        status=TrajectoryStatus.COMPLETED,
        messages=env.messages,
        reward=result.reward if reward is None else reward,
        components=dict(result.components),
        verify_info=dict(result.info),
        verifier_version=entry.verifier_version if reward is None else "loose-v0",
        failure=result.failure,
    )


async def store_records(url: str, records: list[TrajectoryRecord]) -> None:
    store = TrajectoryStore(url, flush_interval_s=0.01)
    await store.start()
    try:
        for record in records:
            store.record(record)
        await store.flush()
    finally:
        await store.stop()


async def sample_store(url: str, run: str) -> list[TrajectoryRecord]:
    """Eight trajectories of one run (the Postgres database is shared by the session's tests)."""
    records = [
        await math_record("55*29 = 1595, minus 26: \\boxed{1569}", run=run),
        await math_record("The answer is 1569.", run=run),  # right, phrased: math passes, exact passes
        await math_record("\\boxed{1,569}", run=run),  # right with a separator: exact fails, math passes
        await math_record("\\boxed{1570}", run=run),
        await math_record("\\boxed{1568} or \\boxed{1569}", run=run),  # hedged: 0
        await math_record("I give up ```` <script>alert(1)</script>", run=run),
        await math_record("\\boxed{1500}", run=run, reward=1.0),  # a loose verifier passed a wrong answer
    ]
    update = {"id": uuid.uuid4().hex, "status": TrajectoryStatus.LIVE, "reward": None}
    live = records[0].model_copy(update=update)
    await store_records(url, [*records, live])
    return records


async def test_report_statistics_extremes_and_disagreements(database_url: str) -> None:
    run = uuid.uuid4().hex
    records = await sample_store(database_url, run)
    report = await build_audit(database_url, "math", run=run, n=100, top=2, registry=REGISTRY)
    assert report.available == report.sampled == 8
    assert report.unscored() == 1 and len(report.scored) == 7
    stats = report.stats()
    assert stats["mean"] == pytest.approx(4 / 7) and stats["max"] == 1.0 and stats["min"] == 0.0
    histogram = report.histogram()
    assert len(histogram) == 10 and sum(count for *_, count in histogram) == 7
    assert histogram[0][2] == 3 and histogram[-1][2] == 4
    highest, lowest = report.extremes()
    assert [row.reward for row in highest] == [1.0, 1.0] and [row.reward for row in lowest] == [0.0, 0.0]
    assert report.component_means()["correct"] == pytest.approx(3 / 7)
    assert set(report.versions()["verifier"]) == {REGISTRY.get("math").verifier_version, "loose-v0"}

    assert report.verifiers() == ["stored", "exact", "math", "normalized", "numeric"]
    by_id = {row.record.id: row for row in report.rows}
    loose = by_id[records[-1].id]
    assert loose.verdicts == {
        "stored": True,
        "math": False,
        "numeric": False,
        "exact": False,
        "normalized": False,
    }
    separator = by_id[records[2].id]
    assert separator.verdicts["math"] and separator.verdicts["numeric"] and not separator.verdicts["exact"]
    # Exact match on the last boxed answer passes the hedge that every answer verifier refuses.
    hedged = by_id[records[4].id]
    assert hedged.answer == "1569" and hedged.verdicts["exact"] and not hedged.verdicts["math"]
    disagreeing = {row.record.id for row in report.disagreements()}
    assert disagreeing == {records[2].id, records[4].id, records[-1].id}
    assert report.agreement()[("stored", "math")] == (6, 7)  # only the loose row
    assert report.agreement()[("stored", "exact")] == (4, 7)  # the separator, the hedge, the loose row


async def test_markdown_and_html_reports(database_url: str, tmp_path: Path) -> None:
    run = uuid.uuid4().hex
    await sample_store(database_url, run)
    report = await build_audit(database_url, "math", run=run, n=100, top=3, registry=REGISTRY)
    markdown = render_markdown(report)
    assert markdown.startswith("# Verifier audit: `math`")
    assert f"Sampled 8 of 8 stored trajectories of `math`, run `{run}`" in markdown
    assert "**Scored by 2 verifier versions**" in markdown and "gym-server reverify --env math" in markdown
    assert "| `stored` vs `math` | 6 | 7 | 85.7% |" in markdown
    assert "## Highest-scored transcripts" in markdown and "## Lowest-scored transcripts" in markdown
    assert re.search(r"\[ 0\.900,  1\.000\]      4 █+", markdown)  # the last bin is closed
    # A transcript holding a four-backtick run is fenced with five, so it cannot break out of its block.
    assert "`````text\n" in markdown

    page = render_html(report)
    assert page.startswith("<!doctype html>") and "<svg" in page and "</html>" in page
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<strong class='warn'>Scored by 2 verifier versions</strong>" in page

    for name in ("report.md", "sub/report.html"):
        write_report(report, tmp_path / name)
        assert (tmp_path / name).stat().st_size > 1000
    with pytest.raises(AuditError, match=r"\.md or \.html"):
        write_report(report, tmp_path / "report.pdf")


async def test_sampling_is_seeded_and_bounded(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gym.db'}"
    await store_records(url, [await math_record(f"\\boxed{{{1560 + i}}}") for i in range(12)])
    first = await build_audit(url, "math", n=5, seed=3, registry=REGISTRY)
    again = await build_audit(url, "math", n=5, seed=3, registry=REGISTRY)
    other = await build_audit(url, "math", n=5, seed=4, registry=REGISTRY)
    ids = [row.record.id for row in first.rows]
    assert first.sampled == 5 and first.available == 12 and len(set(ids)) == 5
    assert ids == [row.record.id for row in again.rows]
    assert ids != [row.record.id for row in other.rows]
    with pytest.raises(AuditError, match="no stored trajectories of 'math' in run 'nope'"):
        await build_audit(url, "math", run="nope", registry=REGISTRY)


async def test_multi_turn_environments_get_no_second_verifier(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gym.db'}"
    entry = REGISTRY.get("counter")
    record = TrajectoryRecord(
        id="c1",
        env="counter",
        env_version=entry.version,
        task_id="counter-0000",
        status=TrajectoryStatus.COMPLETED,
        messages=[{"role": "assistant", "content": "26"}],
        reward=1.0,
        components={"reached": 1.0},
    )
    await store_records(url, [record])
    report = await build_audit(url, "counter", registry=REGISTRY)
    assert report.agreement() == {} and report.rows[0].verdicts == {}
    assert "No second verifier applies" in render_markdown(report)
    assert isinstance(report, AuditReport)


def test_audit_command_writes_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, database_url: str
) -> None:
    run = uuid.uuid4().hex
    asyncio.run(sample_store(database_url, run))
    monkeypatch.setattr("gym_server.sdk.registry.Registry.discover", classmethod(lambda cls: REGISTRY))
    app = typer.Typer()
    app.command()(rescore.audit)
    app.command()(rescore.reverify)
    out = tmp_path / "audit.html"
    result = CliRunner().invoke(
        app, ["audit", "math", "--run", run, "--n", "5", "--out", str(out), "--database-url", database_url]
    )
    assert result.exit_code == 0, result.output
    assert "Audited 5 of 8 stored trajectories of math" in result.output
    assert "<svg" in out.read_text()
    missing = CliRunner().invoke(app, ["audit", "nowhere", "--database-url", database_url])
    assert missing.exit_code == 1 and "no stored trajectories of 'nowhere'" in missing.output
