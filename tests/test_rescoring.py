"""Re-scoring stored trajectories: the service, `POST /v1/rollouts/{id}/reverify` and `gym-server reverify`,
on a real SQLite file and the PostgreSQL server, with a verifier that changed under the same name."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from conftest import AppHarness, make_settings
from gymtest import call, open_counter, solve_counter, wait_for_rollout
from typer.testing import CliRunner

from gym_env_counter.env import CounterEnv
from gym_server import VerifyResult
from gym_server.app import create_app
from gym_server.cli import rescore
from gym_server.core.settings import LimitSettings
from gym_server.scoring import rescoring
from gym_server.scoring.rescoring import CannotRescore, Rescorer
from gym_server.sdk.registry import Registry
from gym_server.store.records import TrajectoryRecord
from gym_server.store.writer import TrajectoryStore


class HalfCounter(CounterEnv):
    """The counter with a changed verifier: reaching the target is now worth only half."""

    async def verify(self) -> VerifyResult:
        first = await super().verify()
        return first.model_copy(update={"reward": first.reward / 2})


@asynccontextmanager
async def serve(database_url: str, *classes: type[CounterEnv]) -> AsyncIterator[AppHarness]:
    settings = make_settings(database_url)
    app = create_app(settings, Registry(classes))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            yield AppHarness(app, client, settings)


async def finished_counter(gym: AppHarness, run: str = "r1", *, solve: bool = True) -> str:
    """Play a counter episode (solved, or submitted at once), close it, and wait for its row."""
    session = await open_counter(gym.client, run=run)
    sid = str(session["session_id"])
    if solve:
        await solve_counter(gym.client, sid)
    else:
        await gym.client.post(f"/v1/sessions/{sid}/step", json={"message": call("submit")})
    await gym.client.delete(f"/v1/sessions/{sid}")
    await wait_for_rollout(gym.client, sid, "completed")
    return sid


def assert_problem(response: httpx.Response, status: int, slug: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = dict(response.json())
    assert body["type"] == f"urn:gym-server:problem:{slug}"
    assert "Traceback" not in response.text
    return body


async def test_a_changed_verifier_rescores_and_keeps_the_old_score(database_url: str) -> None:
    async with serve(database_url, CounterEnv) as old:
        sid = await finished_counter(old)
        before = (await old.client.get(f"/v1/rollouts/{sid}")).json()
    assert before["reward"] == 1.0
    old_version = before["verifier_version"]
    assert old_version == Registry([CounterEnv]).get("counter").verifier_version

    async with serve(database_url, HalfCounter) as new:
        response = await new.client.post(f"/v1/rollouts/{sid}/reverify")
        assert response.status_code == 200, response.text
        body = response.json()
        new_version = Registry([HalfCounter]).get("counter").verifier_version
        assert new_version != old_version
        assert body["previous"] == {"reward": 1.0, "verifier_version": old_version}
        assert body["current"] == {"reward": 0.5, "verifier_version": new_version}
        assert body["changed"] is True and body["delta"] == -0.5
        assert body["components"] == {"reached": 1.0, "submitted": 1.0}
        assert body["info"]["rescore"]["previous_env_version"] == before["env_version"]
        assert body["failure"] is None

        stored = (await new.client.get(f"/v1/rollouts/{sid}")).json()
        assert stored["reward"] == 0.5 and stored["verifier_version"] == new_version
        assert stored["messages"] == before["messages"]  # the transcript itself is never touched
        store: TrajectoryStore = new.app.state.store
        (rescored,) = await store.list_rescores(sid)
        assert (rescored.previous_reward, rescored.reward) == (1.0, 0.5)
        assert (rescored.previous_verifier_version, rescored.verifier_version) == (old_version, new_version)

        again = (await new.client.post(f"/v1/rollouts/{sid}/reverify")).json()
        assert again["previous"]["reward"] == 0.5 and again["changed"] is False and again["delta"] == 0.0
        assert len(await store.list_rescores(sid)) == 2


async def test_an_episode_on_an_inline_task_is_rescored_on_that_task(database_url: str) -> None:
    """Issue 24: the demo's inline tasks (`learn-15`) were skipped as "not in the current dataset". The
    task is kept with the trajectory; it wins over a dataset task of the same id (the episode was not
    played on that one), and a client cannot forge it through its own metadata."""
    async with serve(database_url, CounterEnv) as old:
        sids = []
        for task_id in ("learn-15", "counter-0000"):  # a new id, and one the dataset also has
            forged = {"inline_task": {"id": task_id, "prompt": "x", "answer": 999}}
            inline = {"id": task_id, "prompt": "Bring it to 7.", "answer": 7}
            created = await old.client.post(
                "/v1/sessions", json={"env": "counter", "task": inline, "seed": 0, "metadata": forged}
            )
            assert created.status_code == 201, created.text
            sid = str(created.json()["session_id"])
            await solve_counter_to(old.client, sid, 7)
            await old.client.delete(f"/v1/sessions/{sid}")
            stored = await wait_for_rollout(old.client, sid, "completed")
            assert stored["reward"] == 1.0
            assert stored["metadata"]["inline_task"] == {
                "id": task_id,
                "prompt": "Bring it to 7.",
                "answer": 7,
                "metadata": {},
            }
            sids.append(sid)
        drawn = await finished_counter(old)  # a dataset task: nothing extra is stored
        assert "inline_task" not in (await old.client.get(f"/v1/rollouts/{drawn}")).json()["metadata"]

    async with serve(database_url, HalfCounter) as new:
        for sid in sids:
            response = await new.client.post(f"/v1/rollouts/{sid}/reverify")
            assert response.status_code == 200, response.text
            assert response.json()["current"]["reward"] == 0.5  # reached 7: the inline target


async def solve_counter_to(client: httpx.AsyncClient, session_id: str, target: int) -> None:
    """Bring the counter to `target` and submit (the prompt of an inline task need not name it)."""
    read = (await client.post(f"/v1/sessions/{session_id}/step", json={"message": call("read")})).json()
    value = int(read["messages"][0]["content"])
    while value != target:
        amount = max(-10, min(10, target - value))
        stepped = await client.post(
            f"/v1/sessions/{session_id}/step", json={"message": call("add", {"amount": amount})}
        )
        value = int(stepped.json()["messages"][0]["content"])
    await client.post(f"/v1/sessions/{session_id}/step", json={"message": call("submit")})


async def test_same_verifier_gives_the_same_score(database_url: str) -> None:
    async with serve(database_url, CounterEnv) as gym:
        solved = await finished_counter(gym)
        failed = await finished_counter(gym, solve=False)
        for sid, reward in ((solved, 1.0), (failed, 0.0)):
            body = (await gym.client.post(f"/v1/rollouts/{sid}/reverify")).json()
            assert body["previous"]["reward"] == body["current"]["reward"] == reward
            assert body["previous"]["verifier_version"] == body["current"]["verifier_version"]
            assert body["changed"] is False


async def test_unknown_rollout_is_404_problem(database_url: str) -> None:
    async with serve(database_url, CounterEnv) as gym:
        body = assert_problem(await gym.client.post("/v1/rollouts/nope/reverify"), 404, "rollout-not-found")
        assert body["detail"] == "no stored rollout 'nope'"
        assert (await gym.client.get("/v1/rollouts/nope")).status_code == 404  # the old routes still work


async def test_live_sessions_cannot_be_rescored(database_url: str) -> None:
    async with serve(database_url, CounterEnv) as gym:
        session = await open_counter(gym.client)
        await gym.app.state.store.flush()
        response = await gym.client.post(f"/v1/rollouts/{session['session_id']}/reverify")
        body = assert_problem(response, 409, "cannot-rescore")
        assert "still live" in body["detail"]


async def test_a_removed_environment_or_task_is_a_clear_409(database_url: str, tmp_path: Path) -> None:
    async with serve(database_url, CounterEnv) as gym:
        sid = await finished_counter(gym)

    class Unrelated(CounterEnv):
        name = "unrelated"

    async with serve(database_url, Unrelated) as gym:
        body = assert_problem(await gym.client.post(f"/v1/rollouts/{sid}/reverify"), 409, "cannot-rescore")
        assert "environment 'counter' is not installed any more" in body["detail"]

    folder = tmp_path / "counter"
    folder.mkdir()
    (folder / "train.jsonl").write_text(json.dumps({"id": "counter-9999", "prompt": "to 3", "answer": 3}))

    class Shrunk(CounterEnv):
        dataset_dir = folder

    async with serve(database_url, Shrunk) as gym:
        body = assert_problem(await gym.client.post(f"/v1/rollouts/{sid}/reverify"), 409, "cannot-rescore")
        assert "task 'counter-0000' is not in the current dataset of 'counter'" in body["detail"]
        assert body["task_id"] == "counter-0000"


async def test_rescore_many_summarises_changes_by_env(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rescoring, "PAGE_SIZE", 2)  # five rows: three pages
    async with serve(database_url, CounterEnv) as gym:
        solved = [await finished_counter(gym, "batch") for _ in range(3)]
        failed = await finished_counter(gym, "batch", solve=False)
        await finished_counter(gym, "other")
        live = await open_counter(gym.client, run="batch")
        await gym.app.state.store.flush()
        rescorer = Rescorer(Registry([HalfCounter]), gym.app.state.store, LimitSettings())
        seen: list[int] = []
        summary = await rescorer.rescore_many(run="batch", on_total=seen.append)
        assert seen == [5]
        assert summary.total.rescored == 4 and summary.total.skipped == 1
        assert summary.skipped[0][0] == live["session_id"]
        assert summary.total.changed == 3 and summary.total.down == 3 and summary.total.up == 0
        assert summary.total.mean_delta == pytest.approx(-0.375)  # three -0.5 and one 0
        assert {o.rollout_id for o in summary.outcomes} == {*solved, failed}
        assert set(summary.by_env) == {"counter"}
        limited = await rescorer.rescore_many(run="batch", limit=2)
        assert len(limited.outcomes) + len(limited.skipped) == 2
        with pytest.raises(CannotRescore):
            await rescorer.rescore(str(live["session_id"]))


# -- the command line -----------------------------------------------------------------------------


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, wide_terminal: None) -> typer.Typer:
    monkeypatch.chdir(tmp_path)
    for name in ("GYM_DATABASE_URL", "GYM_STORE__URL", "GYM_STORE__PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(rescore, "load_registry", lambda: Registry([HalfCounter]))
    app = typer.Typer()
    app.command()(rescore.reverify)
    app.command()(rescore.audit)
    return app


async def seed_rows(database_url: str, count: int, run: str = "cli") -> list[str]:
    async with serve(database_url, CounterEnv) as gym:
        return [await finished_counter(gym, run) for _ in range(count)]


def test_reverify_command_prints_a_diff_table(cli: typer.Typer, database_url: str) -> None:
    ids = asyncio.run(seed_rows(database_url, 2))
    result = CliRunner().invoke(cli, ["reverify", "--run", "cli", "--database-url", database_url])
    assert result.exit_code == 0, result.output
    assert "reverify run cli" in result.output
    row = next(line for line in result.output.splitlines() if "counter" in line)
    cells = [cell.strip() for cell in row.split("│") if cell.strip()]
    assert cells == ["counter", "2", "2", "0", "2", "-0.5000", "0", "0"]
    assert "2 of 2 re-scored trajectories changed (0 up, 2 down); 0 skipped." in result.output

    async def stored() -> list[TrajectoryRecord | None]:
        store = TrajectoryStore(database_url)
        await store.start()
        try:
            return [await store.get(sid) for sid in ids]
        finally:
            await store.stop()

    assert [record.reward if record else None for record in asyncio.run(stored())] == [0.5, 0.5]
    limited = CliRunner().invoke(
        cli, ["reverify", "--run", "cli", "--limit", "1", "--database-url", database_url]
    )
    assert "0 of 1 re-scored trajectories changed" in limited.output


def test_reverify_needs_a_filter_and_reports_empty_matches(cli: typer.Typer, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    bare = CliRunner().invoke(cli, ["reverify", "--database-url", url])
    assert bare.exit_code == 2 and "give --run and/or --env" in bare.output
    empty = CliRunner().invoke(cli, ["reverify", "--run", "nothing", "--database-url", url])
    assert empty.exit_code == 0, empty.output
    assert "No stored trajectories match run nothing." in empty.output


def test_reverify_against_a_dead_database_fails_cleanly(cli: typer.Typer) -> None:
    url = "postgresql+psycopg://postgres@127.0.0.1:9/nothing"
    result = CliRunner().invoke(cli, ["reverify", "--run", "x", "--database-url", url])
    assert result.exit_code == 1
    assert "cannot re-score" in result.output and "Traceback" not in result.output
