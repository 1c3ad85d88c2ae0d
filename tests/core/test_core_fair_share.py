"""Fair dispatch (``core.dispatch.fair_share``): the order itself, then the order and the queue
position read from a real database (PostgreSQL, each test rolled back; and SQLite). A worker's claim
by the order is tested in ``tests/workers/test_worker_runs.py``."""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, update
from sqlalchemy.orm import Session, sessionmaker

from core import auth
from core.db import make_session_factory, utcnow
from core.dispatch import fair_share
from core.dispatch.fair_share import Queue, Waiting
from core.dispatch.queue import CeleryDispatcher
from core.enums import ExperimentStatus
from core.experiments import service as experiments
from core.migrate import upgrade
from core.models import Experiment
from core.settings import Settings
from learners.admission.parse import parse_spec

S = ExperimentStatus
T0 = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def test_interrupted_runs_go_first_then_projects_take_turns() -> None:
    waiting = [
        Waiting("a1", "A", at(1)),
        Waiting("a2", "A", at(2)),
        Waiting("a3", "A", at(3)),
        Waiting("b1", "B", at(4)),
        Waiting("b2", "B", at(5)),
        Waiting("t1", "A", at(6), interrupted_at=at(7)),  # a takeover: first despite its project
    ]
    # A holds no worker and neither has started a run: B's runs are not stuck behind A's backlog.
    assert list(fair_share.order(Queue(waiting))) == ["t1", "b1", "a1", "b2", "a2", "a3"]
    # In FIFO order b1 would be fourth; A's two running runs put B ahead of all of A's backlog.
    holding = Queue(waiting, holding={"A": 2})
    assert list(fair_share.order(holding)) == ["t1", "b1", "b2", "a1", "a2", "a3"]


def test_ties_go_to_the_project_that_started_a_run_least_recently() -> None:
    waiting = [Waiting("a1", "A", at(1)), Waiting("b1", "B", at(2)), Waiting("c1", "C", at(3))]
    recent = Queue(waiting, last_start={"A": at(100), "B": at(50)})
    # C never started a run; B started one before A did.
    assert list(fair_share.order(recent)) == ["c1", "b1", "a1"]
    # With no history the first queued goes first.
    assert list(fair_share.order(Queue(waiting))) == ["a1", "b1", "c1"]


def test_interrupted_runs_keep_the_order_they_were_interrupted_in() -> None:
    waiting = [
        Waiting("x", "A", at(1), interrupted_at=at(30)),
        Waiting("y", "B", at(2), interrupted_at=at(20)),
        Waiting("z", "B", at(3)),
    ]
    assert list(fair_share.order(Queue(waiting, holding={"A": 5}))) == ["y", "x", "z"]


@pytest.fixture
def dispatcher(tmp_path: Path, pg_url: str) -> CeleryDispatcher:
    # A queue of the test's own: other tests' runs in the shared database are not on it.
    prefix = f"fair-{secrets.token_hex(3)}."
    settings = Settings(
        var_dir=tmp_path, database_url=pg_url, broker_url="filesystem://", queue_prefix=prefix
    )
    return CeleryDispatcher(settings)


def _submitter(
    sessions: sessionmaker[Session],
    dispatcher: CeleryDispatcher,
    tiny_spec: Callable[..., dict[str, Any]],
) -> Callable[[str], str]:
    def submit(project: str) -> str:
        with sessions() as session:
            owner = auth.ensure_project(session, project).id
            spec = parse_spec(tiny_spec(name=f"{project}-run"))
            return experiments.submit(session, dispatcher, spec, owner).id

    return submit


def _set(sessions: sessionmaker[Session], run_id: str, **values: Any) -> None:
    with sessions() as session:
        session.execute(update(Experiment).where(Experiment.id == run_id).values(**values))
        session.commit()


def _positions(sessions: sessionmaker[Session], run_ids: list[str]) -> list[int | None]:
    with sessions() as session:
        return [experiments.queue_position(session, experiments.get(session, r)) for r in run_ids]


def test_the_queue_position_is_the_place_in_the_fair_order(
    rollback_sessions: sessionmaker[Session],
    dispatcher: CeleryDispatcher,
    tiny_spec: Callable[..., dict[str, Any]],
) -> None:
    submit = _submitter(rollback_sessions, dispatcher, tiny_spec)
    a = [submit(f"fair-a-{secrets.token_hex(2)}")]
    project_a = _project_of(rollback_sessions, a[0])
    a += [_resubmit(rollback_sessions, dispatcher, tiny_spec, project_a) for _ in range(3)]
    b = submit(f"fair-b-{secrets.token_hex(2)}")
    with rollback_sessions() as session:
        queue = experiments.get(session, b).queue
    assert queue == f"{dispatcher.settings.queue_prefix}torch.gymnasium"
    # A's first run holds a worker: B's run, submitted last, is next in line.
    _set(rollback_sessions, a[0], status=S.RUNNING, started_at=utcnow())
    assert _positions(rollback_sessions, [a[1], a[2], a[3], b]) == [2, 3, 4, 1]
    # A run of A handed back by a stopping worker goes ahead of everything.
    _set(rollback_sessions, a[3], interrupted_at=utcnow())
    assert _positions(rollback_sessions, [a[1], a[2], a[3], b]) == [3, 4, 1, 2]
    assert _positions(rollback_sessions, [a[0]]) == [None]  # not queued


def _project_of(sessions: sessionmaker[Session], run_id: str) -> str:
    with sessions() as session:
        return experiments.get(session, run_id).project_id


def _resubmit(
    sessions: sessionmaker[Session],
    dispatcher: CeleryDispatcher,
    tiny_spec: Callable[..., dict[str, Any]],
    project_id: str,
) -> str:
    with sessions() as session:
        spec = parse_spec(tiny_spec())
        return experiments.submit(session, dispatcher, spec, project_id).id


@pytest.fixture
def sqlite_sessions(tmp_path: Path) -> Iterator[sessionmaker[Session]]:
    url = f"sqlite:///{tmp_path / 'fair.db'}"
    upgrade(url)
    engine = create_engine(url)
    try:
        yield make_session_factory(engine)
    finally:
        engine.dispose()


def test_the_order_reads_the_same_on_sqlite(
    sqlite_sessions: sessionmaker[Session],
    tmp_path: Path,
    tiny_spec: Callable[..., dict[str, Any]],
) -> None:
    settings = Settings(
        var_dir=tmp_path,
        database_url=str(sqlite_sessions.kw["bind"].url),
        broker_url="filesystem://",
        queue_prefix="fairlite.",
    )
    dispatcher = CeleryDispatcher(settings)
    submit = _submitter(sqlite_sessions, dispatcher, tiny_spec)
    a1 = submit("lite-a")
    a2 = _resubmit(sqlite_sessions, dispatcher, tiny_spec, _project_of(sqlite_sessions, a1))
    b1 = submit("lite-b")
    # A started a run before (a finished one); B never did: B goes before A's older run.
    _set(sqlite_sessions, a1, status=S.SUCCEEDED, started_at=utcnow())
    assert _positions(sqlite_sessions, [a2, b1]) == [2, 1]
