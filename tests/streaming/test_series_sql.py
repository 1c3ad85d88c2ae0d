"""Charts shrunk in the database (``SeriesRepository.sample``, ``GET /v1/metrics``) on SQLite and
PostgreSQL, held to the plain-Python rule of ``core.metrics.downsample.min_max`` on the same stored
points: spikes, non-finite runs, equal values, uneven steps, a hole in the steps, several series of
a run at once. Each test's rows are rolled back (PostgreSQL) or stay in a module-wide SQLite
file."""

from __future__ import annotations

import csv
import io
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from api.app import create_app
from core import migrate
from core.db import make_engine, make_session_factory
from core.dispatch.queue import CeleryDispatcher
from core.experiments import service as experiments
from core.metrics.downsample import Point, min_max
from core.metrics.repository import MetricRepository, MetricWrite
from core.metrics.series import SeriesRepository
from core.retention.repository import RetentionRepository
from core.settings import Settings
from core.storage import FilesystemStore
from learners.admission.parse import parse_spec
from tests.auth_support import bearer, default_project_id, new_key
from tests.series_support import expected_tiers, noisy, stored_tiers

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A migrated SQLite file for this module."""
    url = f"sqlite:///{tmp_path_factory.mktemp('series') / 'series.db'}"
    migrate.upgrade(url)
    return url


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest) -> Iterator[tuple[str, sessionmaker[Session]]]:
    """The database's URL and sessions: SQLite, or the session's PostgreSQL in a rolled-back
    transaction."""
    if request.param == "postgresql":
        yield request.getfixturevalue("pg_url"), request.getfixturevalue("rollback_sessions")
        return
    url = request.getfixturevalue("sqlite_url")
    engine = make_engine(url)
    yield url, make_session_factory(engine)
    engine.dispose()


@pytest.fixture
def app_settings(tmp_path: Path, db: tuple[str, sessionmaker[Session]]) -> Settings:
    """Settings on the test's database with an embedded broker nobody consumes."""
    return Settings(
        var_dir=tmp_path / "var",
        database_url=db[0],
        broker_url="filesystem://",
        artifacts_dir=tmp_path / "artifacts",
        queue_prefix="seriestest.",
    )


@pytest.fixture
def session(db: tuple[str, sessionmaker[Session]]) -> Iterator[Session]:
    """The test's session."""
    with db[1]() as s:
        yield s


@pytest.fixture
def new_run(
    session: Session, app_settings: Settings, tiny_spec: Callable[..., dict[str, Any]]
) -> Callable[[dict[str, list[Point]]], str]:
    """Submits a run and stores its series the way a worker does (step by step, every name)."""

    def make(series: dict[str, list[Point]]) -> str:
        run = experiments.submit(
            session,
            CeleryDispatcher(app_settings),
            parse_spec(tiny_spec()),
            default_project_id(session),
        )
        writes = [
            MetricWrite(p.step, n, p.value, p.wall_time) for n, ps in series.items() for p in ps
        ]
        writes.sort(key=lambda w: (w.step, w.name))
        metrics = MetricRepository(session)
        for start in range(0, len(writes), 5000):
            metrics.write(run.id, writes[start : start + 5000])
        session.commit()
        return run.id

    return make


def _noisy(seed: int, length: int) -> list[Point]:
    return noisy(seed, length, period=40)


@pytest.mark.parametrize("max_points", [4, 5, 37, 500, 2999, 3000])
def test_a_sample_is_the_rule_applied_to_the_stored_series(
    session: Session, new_run: Callable[[dict[str, list[Point]]], str], max_points: int
) -> None:
    run = new_run({"train/return": _noisy(1, 3000)})
    repo = SeriesRepository(session)
    stored = repo.points(run, "train/return")

    [sample] = repo.sample(run, ["train/return"], max_points)

    assert len(stored) == 3000 and sample.total_points == 3000
    assert sample.points == min_max(stored, max_points)
    assert len(sample.points) <= max_points
    if max_points < 3000:
        assert {1e6, -1e6} <= {p.value for p in sample.points}
    if 500 <= max_points < 3000:  # buckets narrower than the 150 non-finite points in a row
        assert None in {p.value for p in sample.points}


def test_the_series_of_a_run_are_sampled_together_each_by_its_own_buckets(
    session: Session, new_run: Callable[[dict[str, list[Point]]], str]
) -> None:
    shared = _noisy(2, 2000)
    series = {
        "learner/loss": shared,
        "learner/entropy": [Point(p.step, -p.value if p.value else p.value, 0.0) for p in shared],
        "train/return": _noisy(3, 2500),
        "eval/return": _noisy(4, 40),
    }
    run = new_run(series)
    other = new_run({"learner/loss": _noisy(5, 1000)})
    repo = SeriesRepository(session)

    names = repo.names(run)
    samples = repo.sample(run, [*names, "not/reported"], 100)

    assert names == sorted(series)
    assert [s.name for s in samples] == names
    for sample in samples:
        stored = repo.points(run, sample.name)
        assert stored == series[sample.name]
        assert sample.points == min_max(stored, 100), sample.name
        assert sample.total_points == len(stored)
    assert repo.names(other) == ["learner/loss"]
    assert repo.names(new_run({})) == []


def test_the_api_serves_the_database_sample_as_json_and_csv(
    db: tuple[str, sessionmaker[Session]],
    app_settings: Settings,
    new_run: Callable[[dict[str, list[Point]]], str],
) -> None:
    points = _noisy(6, 1500)
    run = new_run({"train/return": points, "learner/loss": _noisy(7, 30)})
    app = create_app(
        app_settings, session_factory=db[1], storage=FilesystemStore(app_settings.artifacts_dir)
    )
    params = {"experiment_ids": run, "names": "train/return", "max_points": 64}
    with TestClient(app) as client:
        client.headers.update(bearer(new_key(db[1], app_settings)))
        body = client.get("/v1/metrics", params=params).json()
        exported = client.get("/v1/metrics", params={**params, "format": "csv"}).text
        everything = client.get("/v1/metrics", params={"experiment_ids": run}).json()

    expected = min_max(points, 64)
    [series] = body["series"]
    assert series["total_points"] == 1500
    assert series["steps"] == [p.step for p in expected]
    assert series["values"] == [p.value for p in expected]
    rows = list(csv.DictReader(io.StringIO(exported)))
    assert [(int(r["step"]), float(r["wall_time"])) for r in rows] == [
        (p.step, p.wall_time) for p in expected
    ]
    assert [(s["name"], s["total_points"]) for s in everything["series"]] == [
        ("learner/loss", 30),
        ("train/return", 1500),
    ]
    assert len(everything["series"][1]["steps"]) <= 500


def test_summaries_follow_every_write_rewrite_and_deletion_of_points(
    session: Session, new_run: Callable[[dict[str, list[Point]]], str]
) -> None:
    # Batches as a worker writes them (every name at one or a few steps), at strides from one step
    # to thousands (within the finest tier's ranges and across them), then a retry that reports
    # stored steps again with other values, a resume that forgets every point after a step, more
    # reports, and a compaction that thins a stretch of one series. After each, the stored
    # summaries are exactly those of the stored points, and every chart is the rule's.
    rng = random.Random(11)
    run = new_run({})
    metrics, repo = MetricRepository(session), SeriesRepository(session)
    names = ["a/return", "b/loss", "c/entropy"]
    step = 0

    def report(batches: int) -> None:
        nonlocal step
        for _ in range(batches):
            batch = []
            for _ in range(rng.choice([1, 1, 3])):
                step += rng.choice([1, 7, 64, 500, 4000])
                value = rng.choice([None, round(rng.gauss(0, 1), 1), 1e6, -1e6, 0.0])
                batch += [MetricWrite(step, n, value, float(step)) for n in names]
            metrics.write(run, batch)

    def check() -> None:
        stored = {n: repo.points(run, n) for n in names}
        assert stored_tiers(session, run) == expected_tiers(stored)
        for max_points in (4, 10, 37, 500):
            for sample in repo.sample(run, names, max_points):
                assert sample.points == min_max(stored[sample.name], max_points)
                assert sample.total_points == len(stored[sample.name])

    report(300)
    check()
    steps = [p.step for p in repo.points(run, "a/return")]
    metrics.write(run, [MetricWrite(s, "a/return", 5e6, 0.0) for s in rng.sample(steps, 20)])
    check()
    metrics.delete_after(run, steps[len(steps) // 2])
    check()
    report(100)
    check()
    page = RetentionRepository(session).point_page(run, "b/loss", steps[10], 200)
    RetentionRepository(session).delete_points(run, "b/loss", page[::2])
    check()
