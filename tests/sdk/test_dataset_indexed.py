"""`Dataset.indexed`: the answer a create may take on the event loop, only once the index is in memory
and only when `get` is the plain index lookup (a generated dataset's `get` may do CPU work)."""

from __future__ import annotations

from gym_server.sdk.tasks import Dataset, Task


def test_indexed_answers_only_after_the_index_is_loaded() -> None:
    dataset = Dataset("counter")
    assert dataset.indexed("counter-0001") is None  # not loaded: the caller goes to a thread
    loaded = dataset.get("counter-0001")
    assert loaded is not None
    assert dataset.indexed("counter-0001") is loaded
    assert dataset.indexed("no-such-task") is None


class _Generated(Dataset):
    def get(self, task_id: str) -> Task | None:
        return Task(id=task_id, prompt="made on demand")


def test_a_dataset_with_its_own_get_is_never_answered_from_the_index() -> None:
    dataset = _Generated("counter")
    dataset.tasks()  # the index is loaded, but `get` is not the index lookup
    assert dataset.indexed("counter-0001") is None
