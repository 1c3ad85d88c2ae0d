"""Retention tests run on SQLite (a file per test) and on a PostgreSQL database of this folder's
own (each test in a transaction rolled back at the end), so that no other test's runs are ever due
for compaction here."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from retention_support import Db, RunShape, build_run
from sqlalchemy.orm import sessionmaker

from core import migrate
from core.db import make_engine, make_session_factory
from core.settings import Settings
from tests.conftest import migrated_database


@pytest.fixture(scope="session")
def retention_pg_url(pg_url: str) -> Iterator[str]:
    """A migrated PostgreSQL database beside the session's one, dropped afterwards."""
    with migrated_database("marlforge_retention") as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    """SQLite in a file of the test's own, or this folder's PostgreSQL database in a transaction
    that is rolled back after the test (the sessions' commits release savepoints)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'retention.db'}"
        migrate.upgrade(url)
        engine = make_engine(url)
        yield Db(url, make_session_factory(engine), engine)
        engine.dispose()
        return
    url = request.getfixturevalue("retention_pg_url")
    engine = make_engine(url)
    with engine.connect() as connection:
        outer = connection.begin()
        sessions = sessionmaker(
            bind=connection, join_transaction_mode="create_savepoint", expire_on_commit=False
        )
        try:
            yield Db(url, sessions, connection)
        finally:
            outer.rollback()
    engine.dispose()


@pytest.fixture
def settings(tmp_path: Path, db: Db) -> Settings:
    """Settings on the test's database (default retention) with a broker nobody consumes."""
    return Settings(
        var_dir=tmp_path / "var",
        database_url=db.url,
        broker_url="filesystem://",
        artifacts_dir=tmp_path / "artifacts",
        queue_prefix="retentiontest.",
    )


@pytest.fixture
def new_run(
    db: Db, settings: Settings, tiny_spec: Callable[..., dict[str, Any]]
) -> Callable[[RunShape], str]:
    """Builds a run of ``RunShape`` in the test's database; returns its id."""

    def make(shape: RunShape) -> str:
        with db.sessions() as session:
            return build_run(session, settings, tiny_spec(), shape)

    return make
