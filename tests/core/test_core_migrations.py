"""The schema: built only by Alembic, identical to the models, reversible, on both databases."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

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
    "matches",
    "idempotency_keys",
    "experiment_tags",
    "sweeps",
    "workers",
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


def test_experiments_from_before_projects_move_to_project_default(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    migrate.upgrade(url, "0002")
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO experiments (id, name, algorithm, backend, spec, status, step, "
                    "total_steps, latest_metrics, attempts, created_at, updated_at) VALUES "
                    "('01JAAAAAAAAAAAAAAAAAAAAAAA', 'old run', 'ddpg', 'torch', '{}', 'succeeded', "
                    "10, 10, '{}', 1, '2025-11-22 00:00:00', '2025-11-22 00:00:00')"
                )
            )
        migrate.upgrade(url)
        with engine.connect() as connection:
            project = connection.execute(
                text(
                    "SELECT p.name FROM experiments e JOIN projects p ON p.id = e.project_id "
                    "WHERE e.id = '01JAAAAAAAAAAAAAAAAAAAAAAA'"
                )
            ).scalar_one()
    finally:
        engine.dispose()
    assert project == "default"
