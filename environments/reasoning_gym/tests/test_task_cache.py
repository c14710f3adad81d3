"""The disk cache of generated tasks (issue 37, item 12): listed tasks are the tasks the generator makes,
read back from disk after the first listing, in whole chunks only, regenerated when a file is damaged,
keyed apart per level and split, and the same when made in worker processes."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

pytest.importorskip("reasoning_gym")

from gym_env_reasoning_gym import env as rg_env
from gym_env_reasoning_gym.env import CURATED, ReasoningGymDataset, make_environment
from gym_env_reasoning_gym.task_cache import CHUNK_SIZE, TaskCache
from gym_server.app import create_app
from gym_server.core.settings import Settings
from gym_server.sdk.registry import Registry
from gym_server.sdk.tasks import Task

SIZES = {"train": CHUNK_SIZE + 30, "validation": 4}


def _dataset(tmp_path: Path, generator: str = "leg_counting", **sizes: int) -> ReasoningGymDataset:
    return ReasoningGymDataset(generator, sizes=sizes or SIZES, cache=TaskCache(tmp_path))


def _no_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> Task:
        raise AssertionError("generated a task the cache holds")

    monkeypatch.setattr(ReasoningGymDataset, "_task", refuse)


@pytest.mark.parametrize("generator", [*sorted(CURATED & set(rg_env.generators())), "puzzle24"])
async def test_cached_tasks_are_the_generated_tasks_and_score_alike(tmp_path: Path, generator: str) -> None:
    _dataset(tmp_path, generator, train=3).task_range("train", 0, 3)  # generates and stores the chunk
    cached = _dataset(tmp_path, generator, train=3).task_range("train", 0, 3)  # a fresh process's read
    catalog = ReasoningGymDataset(generator)  # the environment's own dataset, uncached
    assert cached == [catalog.task_at("train", index) for index in range(3)]
    cls = make_environment(generator)
    for task in cached:  # the reference answer of a task read from disk scores as the generated one's
        env = cls(task, 0)
        await env.reset()
        await env.step({"role": "assistant", "content": f"<answer>{task.answer['answer']}</answer>"})
        assert (await env.verify()).reward == 1.0


def test_after_the_first_listing_tasks_come_from_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = _dataset(tmp_path).tasks("train")
    assert [task.id for task in made] == [f"leg_counting-l0-train-{i:05d}" for i in range(SIZES["train"])]
    _no_generation(monkeypatch)
    again = _dataset(tmp_path)
    assert again.tasks("train") == made
    assert again.task_range("train", CHUNK_SIZE - 2, CHUNK_SIZE + 3) == made[CHUNK_SIZE - 2 : CHUNK_SIZE + 3]
    assert again.task_range("train", SIZES["train"] - 1, SIZES["train"] + 50) == made[-1:]
    assert again.task_range("train", 5, 5) == [] and again.task_range("test", 0, 9) == []


def test_only_whole_chunks_are_stored(tmp_path: Path) -> None:
    dataset = _dataset(tmp_path)
    page = dataset.task_range("train", 10, CHUNK_SIZE + 30)  # part of chunk 0, all of the last chunk
    assert [task.id for task in page][:1] == ["leg_counting-l0-train-00010"] and len(page) == CHUNK_SIZE + 20
    files = sorted(path.name for path in tmp_path.rglob("*.jsonl"))
    assert files == ["train-00001.jsonl"]
    assert dataset.task_range("train", 0, 3) == [dataset.task_at("train", index) for index in range(3)]
    assert sorted(path.name for path in tmp_path.rglob("*.jsonl")) == files  # a small page stores nothing


@pytest.mark.parametrize("damage", [b"not json\n", b"", b'{"id": "other", "prompt": "p"}\n'])
def test_a_damaged_chunk_is_generated_again(tmp_path: Path, damage: bytes) -> None:
    made = _dataset(tmp_path).tasks("validation")
    (path,) = tmp_path.rglob("validation-00000.jsonl")
    path.write_bytes(damage)
    assert _dataset(tmp_path).tasks("validation") == made
    assert _dataset(tmp_path).cache.read(
        "leg_counting", path.parent.name, "validation", 0, [t.id for t in made]
    )


def test_levels_and_splits_are_keyed_apart(tmp_path: Path) -> None:
    easy = ReasoningGymDataset("chain_sum", 0, {"train": 3}, cache=TaskCache(tmp_path))
    hard = ReasoningGymDataset("chain_sum", 5, {"train": 3}, cache=TaskCache(tmp_path))
    assert easy.tasks("train") != hard.tasks("train")
    assert len({path.parent for path in tmp_path.rglob("*.jsonl")}) == 2
    assert ReasoningGymDataset("chain_sum", 5, {"train": 3}, cache=TaskCache(tmp_path)).tasks("train") == (
        hard.tasks("train")
    )


def test_an_unwritable_cache_still_serves_the_tasks(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache folder would be")
    dataset = ReasoningGymDataset("gcd", sizes={"train": 3}, cache=TaskCache(blocked))
    assert [task.id for task in dataset.tasks("train")] == [f"gcd-l0-train-{i:05d}" for i in range(3)]


@pytest.mark.slow
def test_tasks_made_in_worker_processes_are_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sizes = {"train": 2 * CHUNK_SIZE}
    monkeypatch.setattr(rg_env, "PARALLEL_AFTER_S", -1.0)  # always worth it
    monkeypatch.setattr(rg_env, "_cpus", lambda: 2)
    pooled = ReasoningGymDataset("gcd", sizes=sizes, cache=TaskCache(tmp_path / "pooled"))
    calls: list[int] = []
    spawn = ReasoningGymDataset._generate_in_workers

    def counted(
        self: ReasoningGymDataset, split: str, chunks: list[int], workers: int
    ) -> dict[int, list[Task]]:
        calls.append(workers)
        return spawn(self, split, chunks, workers)

    monkeypatch.setattr(ReasoningGymDataset, "_generate_in_workers", counted)
    made = pooled.tasks("train")
    assert calls == [2]
    monkeypatch.setattr(rg_env, "PARALLEL_AFTER_S", 1e9)  # never
    alone = ReasoningGymDataset("gcd", sizes=sizes, cache=TaskCache(tmp_path / "alone")).tasks("train")
    assert made == alone and calls == [2]


async def test_the_catalog_pages_through_the_cache(tmp_path: Path) -> None:
    cls = make_environment("leg_counting")
    settings = Settings(server_name="rg-cache", store={"url": f"sqlite:///{tmp_path / 'gym.db'}"})
    app = create_app(settings, Registry([cls]))
    path = f"/v1/environments/reasoning_gym/leg_counting/tasks?offset={CHUNK_SIZE - 1}&limit=102"
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            first = (await client.get(path)).json()
            second = (await client.get(path)).json()
    assert first == second and first["total"] == 1100
    expected = [f"leg_counting-l0-train-{i:05d}" for i in range(CHUNK_SIZE - 1, CHUNK_SIZE + 101)]
    assert [task["id"] for task in first["tasks"]] == expected
    assert all("answer" not in task for task in first["tasks"])
    assert cls.rg_dataset().cache.path("leg_counting", "k", "train", 1).parents[1].is_dir()
