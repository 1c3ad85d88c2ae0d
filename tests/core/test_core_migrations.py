"""The schema: built only by Alembic, identical to the models, reversible, on both databases."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from core import migrate
from core.models import Base

TABLES = {
    "projects",
    "api_keys",
    "auth_sessions",
    "experiments",
    "metric_points",
    "checkpoints",
    "status_transitions",
    "experiment_events",
    "alembic_version",
}


def _check_round_trip(url: str) -> None:
    migrate.upgrade(url)
    engine = create_engine(url)
    try:
        assert set(inspect(engine).get_table_names()) == TABLES
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            assert compare_metadata(context, Base.metadata) == []
        migrate.downgrade(url, "base")
        assert set(inspect(engine).get_table_names()) == {"alembic_version"}
        migrate.upgrade(url)
        assert set(inspect(engine).get_table_names()) == TABLES
    finally:
        engine.dispose()


def test_migrations_match_the_models_on_sqlite(tmp_path: Path) -> None:
    _check_round_trip(f"sqlite:///{tmp_path / 'schema.db'}")


@pytest.mark.integration
def test_migrations_match_the_models_on_postgresql(fresh_postgres_url: str) -> None:
    _check_round_trip(fresh_postgres_url)
