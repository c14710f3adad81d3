"""Fixtures of the inspector's tests: the known store of `inspector_data`, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy.orm import Session
from store.conftest import throwaway_postgres
from ui.inspector_data import populate

from gym_server.store.migrate import make_engine

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(scope="module", params=BACKENDS)
def populated_session(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Session]:
    """A session on a database of its own holding the known store; the tests only read it."""
    if request.param == "sqlite":
        yield from _session(f"sqlite:///{tmp_path_factory.mktemp('ui') / 'ui.db'}")
    else:
        with throwaway_postgres() as url:
            yield from _session(url)


def _session(url: str) -> Iterator[Session]:
    populate(url)
    engine = make_engine(url)
    try:
        with Session(engine) as session:
            yield session
    finally:
        engine.dispose()
