"""The schema: built only by Alembic, identical to the models, reversible, on both databases."""

from __future__ import annotations

import json
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
    "metric_tiers",
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


EVIL = "evil\x1b[2J\x1b]0;pwned\x07\nFAKE LINE\u202e"
REPAIRED = "evil\ufffd[2J\ufffd]0;pwned\ufffd\ufffdFAKE LINE\ufffd"


def _check_names_repaired(url: str) -> None:
    """Names stored with control characters before they were refused (revision 0014) come out
    printable, in their spec too, and the stored specs still validate."""
    import datetime as dt

    from sqlalchemy import insert
    from sqlalchemy.orm import Session

    from core.enums import ExperimentStatus, MatchStatus, Role
    from core.models import ApiKey, Experiment, Match, Project, Sweep
    from learners.api import Label
    from learners.api import parse_spec as parse

    example = Path(__file__).resolve().parents[2] / "examples" / "ddpg_pendulum.json"

    migrate.upgrade(url, "0013")
    engine = create_engine(url)
    now = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    spec = {**parse(json.loads(example.read_text())).model_dump(mode="json"), "name": EVIL}
    try:
        # Core inserts naming only the columns these rows had at revision 0013 (an ORM insert
        # would name every column of the newest models).
        rows = [
            (Project, {"id": "P" * 26, "name": "evil", "created_at": now}),
            (ApiKey, {
                "id": "K" * 26, "project_id": "P" * 26, "name": EVIL, "role": Role.MEMBER,
                "prefix": "mf_x", "token_hash": "0" * 64, "created_at": now,
            }),
            (Sweep, {
                "id": "S" * 26, "project_id": "P" * 26, "name": EVIL,
                "spec": {"name": EVIL, "base": spec}, "configurations": [], "seeds": [1],
                "max_concurrent": 1, "created_at": now, "updated_at": now,
            }),
            (Match, {
                "id": "M" * 26, "project_id": "P" * 26, "name": EVIL, "env": {}, "teams": {},
                "episodes": 1, "seed": 1, "backend": "torch", "status": MatchStatus.SUCCEEDED,
                "created_at": now, "updated_at": now,
            }),
            (Experiment, {
                "id": "E" * 26, "project_id": "P" * 26, "name": EVIL, "algorithm": "ddpg",
                "backend": "torch", "spec": spec, "status": ExperimentStatus.SUCCEEDED,
                "step": 0, "total_steps": 400, "latest_metrics": {}, "attempts": 0,
                "restarts": 0, "created_at": now, "updated_at": now,
            }),
        ]  # fmt: skip
        with Session(engine) as session:
            for model, values in rows:
                session.execute(insert(model.__table__).values(**values))
            session.commit()
        migrate.upgrade(url)
        with Session(engine) as session:
            names = [
                session.get(ApiKey, "K" * 26).name,  # type: ignore[union-attr]
                session.get(Sweep, "S" * 26).name,  # type: ignore[union-attr]
                session.get(Match, "M" * 26).name,  # type: ignore[union-attr]
                session.get(Experiment, "E" * 26).name,  # type: ignore[union-attr]
            ]
            experiment = session.get(Experiment, "E" * 26)
            sweep = session.get(Sweep, "S" * 26)
            assert experiment is not None and sweep is not None
            stored_spec, sweep_spec = experiment.spec, sweep.spec
    finally:
        engine.dispose()
    assert names == [REPAIRED] * 4
    assert stored_spec["name"] == REPAIRED and parse(stored_spec).name == REPAIRED
    assert sweep_spec["name"] == sweep_spec["base"]["name"] == REPAIRED
    assert stored_spec["hyperparameters"] == spec["hyperparameters"]  # the rest is untouched
    from pydantic import TypeAdapter

    assert TypeAdapter(Label).validate_python(REPAIRED) == REPAIRED


def test_names_with_control_characters_are_repaired_on_sqlite(tmp_path: Path) -> None:
    _check_names_repaired(f"sqlite:///{tmp_path / 'names.db'}")


@pytest.mark.integration
def test_names_with_control_characters_are_repaired_on_postgresql(fresh_postgres_url: str) -> None:
    _check_names_repaired(fresh_postgres_url)


def _check_tiers_backfilled(url: str) -> None:
    """Points stored before revision 0018 get their summaries (``metric_tiers``) at the upgrade,
    and a chart drawn from them is the rule's."""
    import datetime as dt

    from sqlalchemy import insert
    from sqlalchemy.orm import Session

    from core.enums import ExperimentStatus
    from core.metrics.downsample import min_max
    from core.metrics.series import SeriesRepository
    from core.models import Experiment, MetricPointRow, Project
    from tests.series_support import expected_tiers, noisy, stored_tiers

    migrate.upgrade(url, "0017")
    engine = create_engine(url)
    now = dt.datetime(2026, 12, 4, tzinfo=dt.UTC)
    run = "E" * 26
    series = {"train/return": noisy(1, 4000, period=40), "learner/loss": noisy(2, 300, period=9)}
    try:
        with Session(engine) as session:
            session.execute(
                insert(Project.__table__).values(id="P" * 26, name="old", created_at=now)
            )
            session.execute(
                insert(Experiment.__table__).values(
                    id=run, project_id="P" * 26, name="old", algorithm="ddpg", backend="torch",
                    spec={}, status=ExperimentStatus.SUCCEEDED, step=0, total_steps=400,
                    latest_metrics={}, attempts=0, restarts=0, created_at=now, updated_at=now,
                )
            )  # fmt: skip
            session.execute(
                insert(MetricPointRow.__table__),
                [
                    {"experiment_id": run, "name": name, "step": p.step, "value": p.value,
                     "wall_time": p.wall_time}
                    for name, points in series.items()
                    for p in points
                ],
            )  # fmt: skip
            session.commit()
        migrate.upgrade(url)
        with Session(engine) as session:
            assert stored_tiers(session, run) == expected_tiers(series)
            [chart] = SeriesRepository(session).sample(run, ["train/return"], 100)
    finally:
        engine.dispose()
    assert chart.points == min_max(series["train/return"], 100)


def test_stored_points_get_their_summaries_on_sqlite(tmp_path: Path) -> None:
    _check_tiers_backfilled(f"sqlite:///{tmp_path / 'tiers.db'}")


@pytest.mark.integration
def test_stored_points_get_their_summaries_on_postgresql(fresh_postgres_url: str) -> None:
    _check_tiers_backfilled(fresh_postgres_url)


def _check_groups_filled(url: str) -> None:
    """Specs stored before revision 0020 say ``share_across_groups: true`` after the upgrade (their
    runs shared one set of networks across a team's groups), each experiment's and each sweep's
    base; a spec that names the field, and DDPG's, are left as they were."""
    import datetime as dt

    from sqlalchemy import insert
    from sqlalchemy.orm import Session

    from core.enums import ExperimentStatus
    from core.models import Experiment, Project, Sweep
    from learners.api import parse_spec as parse

    migrate.upgrade(url, "0019")
    engine = create_engine(url)
    now = dt.datetime(2026, 12, 6, tzinfo=dt.UTC)
    env = {"suite": "mpe", "id": "simple_speaker_listener_v4"}
    given = {"name": "old", "algorithm": "mappo", "backend": "torch", "env": env}
    fresh = parse({**given, "total_steps": 1000})
    old = fresh.model_dump(mode="json")
    del old["hyperparameters"]["share_across_groups"]
    named = {**old, "hyperparameters": {**old["hyperparameters"], "share_across_groups": False}}
    ddpg = {"algorithm": "ddpg", "hyperparameters": {"gamma": 0.9}}
    specs = {"A" * 26: old, "B" * 26: named, "C" * 26: ddpg}
    try:
        with Session(engine) as session:
            session.execute(
                insert(Project.__table__).values(id="P" * 26, name="old", created_at=now)
            )
            for run, spec in specs.items():
                session.execute(
                    insert(Experiment.__table__).values(
                        id=run, project_id="P" * 26, name="old", algorithm=spec["algorithm"],
                        backend="torch", spec=spec, status=ExperimentStatus.SUCCEEDED, step=0,
                        total_steps=400, latest_metrics={}, attempts=0, restarts=0,
                        created_at=now, updated_at=now,
                    )
                )  # fmt: skip
            base = {"algorithm": "maddpg", "backend": "torch", "env": env, "total_steps": 1000}
            session.execute(
                insert(Sweep.__table__).values(
                    id="S" * 26, project_id="P" * 26, name="old", spec={"base": base},
                    configurations=[], seeds=[1], max_concurrent=1, created_at=now,
                    updated_at=now,
                )
            )  # fmt: skip
            session.commit()
        migrate.upgrade(url)
        with Session(engine) as session:
            stored = {run: session.get(Experiment, run).spec for run in specs}  # type: ignore[union-attr]
            sweep = session.get(Sweep, "S" * 26).spec  # type: ignore[union-attr]
    finally:
        engine.dispose()
    assert stored["A" * 26] == {
        **old,
        "hyperparameters": {**old["hyperparameters"], "share_across_groups": True},
    }
    assert parse(stored["A" * 26]).config().share_across_groups is True  # type: ignore[attr-defined]
    assert stored["B" * 26] == named and stored["C" * 26] == ddpg
    assert sweep == {"base": {**base, "hyperparameters": {"share_across_groups": True}}}


def test_stored_specs_keep_their_shared_group_networks_on_sqlite(tmp_path: Path) -> None:
    _check_groups_filled(f"sqlite:///{tmp_path / 'groups.db'}")


@pytest.mark.integration
def test_stored_specs_keep_their_shared_group_networks_on_postgresql(
    fresh_postgres_url: str,
) -> None:
    _check_groups_filled(fresh_postgres_url)
