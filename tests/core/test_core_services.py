"""Status changes and the experiment services on PostgreSQL (each test rolled back)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from core.dispatch.queue import CeleryDispatcher
from core.enums import EventKind, ExperimentStatus
from core.errors import Conflict, NotFound
from core.experiments import service as experiments
from core.lifecycle import transition
from core.metrics.repository import MetricRepository, MetricWrite
from core.models import ExperimentEvent, StatusTransition
from core.settings import Settings
from learners.admission.parse import parse_spec
from tests.auth_support import default_project_id

S = ExperimentStatus
pytestmark = pytest.mark.integration


@pytest.fixture
def session(rollback_sessions: sessionmaker[Session]) -> Iterator[Session]:
    with rollback_sessions() as s:
        yield s


@pytest.fixture
def dispatcher(tmp_path: Path, pg_url: str) -> CeleryDispatcher:
    return CeleryDispatcher(
        Settings(
            var_dir=tmp_path, database_url=pg_url, broker_url="filesystem://", queue_prefix="svc."
        )
    )


@pytest.fixture
def experiment_id(
    session: Session, dispatcher: CeleryDispatcher, tiny_spec: Callable[..., dict[str, Any]]
) -> str:
    return experiments.submit(
        session, dispatcher, parse_spec(tiny_spec()), default_project_id(session)
    ).id


def test_a_transition_happens_only_from_an_expected_status(
    session: Session, experiment_id: str
) -> None:
    assert transition(session, experiment_id, [S.RUNNING], S.SUCCEEDED, "no") is None
    assert transition(session, experiment_id, [S.RUNNING, S.QUEUED], S.RUNNING, None) == S.QUEUED
    assert transition(session, experiment_id, [S.QUEUED], S.CANCELLED, "late") is None
    session.commit()

    timeline = session.scalars(
        select(StatusTransition)
        .where(StatusTransition.experiment_id == experiment_id)
        .order_by(StatusTransition.id)
    ).all()
    assert [(t.from_status, t.to_status) for t in timeline] == [
        (None, S.QUEUED),
        (S.QUEUED, S.RUNNING),
    ]
    events = session.scalars(
        select(ExperimentEvent)
        .where(ExperimentEvent.experiment_id == experiment_id)
        .order_by(ExperimentEvent.id)
    ).all()
    assert [e.kind for e in events] == [EventKind.STATUS, EventKind.STATUS]
    assert events[1].payload == {"from": "queued", "to": "running", "reason": None}
    assert events[0].id < events[1].id


def test_cancel_and_resume_follow_the_status_rules(
    session: Session, dispatcher: CeleryDispatcher, experiment_id: str
) -> None:
    assert experiments.cancel(session, experiment_id).status == S.CANCELLED
    assert experiments.resume(session, dispatcher, experiment_id).status == S.QUEUED
    transition(session, experiment_id, [S.QUEUED], S.RUNNING, None)
    assert experiments.cancel(session, experiment_id).status == S.CANCELLING
    with pytest.raises(Conflict):
        experiments.resume(session, dispatcher, experiment_id)
    transition(session, experiment_id, [S.CANCELLING], S.SUCCEEDED, None)
    with pytest.raises(Conflict):
        experiments.cancel(session, experiment_id)
    with pytest.raises(NotFound):
        experiments.cancel(session, "01JAAAAAAAAAAAAAAAAAAAAAAA")


def test_requeue_orphans_puts_interrupted_runs_back_in_the_queue(
    session: Session, dispatcher: CeleryDispatcher, tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    running = experiments.submit(
        session, dispatcher, parse_spec(tiny_spec()), default_project_id(session)
    ).id
    stopping = experiments.submit(
        session, dispatcher, parse_spec(tiny_spec()), default_project_id(session)
    ).id
    transition(session, running, [S.QUEUED], S.RUNNING, None)
    transition(session, stopping, [S.QUEUED], S.RUNNING, None)
    transition(session, stopping, [S.RUNNING], S.CANCELLING, None)
    session.commit()

    requeued = experiments.requeue_orphans(session, dispatcher)

    assert running in requeued and stopping not in requeued
    assert experiments.get(session, running).status == S.QUEUED
    assert experiments.get(session, stopping).status == S.CANCELLED


def test_a_page_returns_a_whole_step_even_when_it_exceeds_the_limit(
    session: Session, experiment_id: str
) -> None:
    metrics = MetricRepository(session)
    metrics.write(
        experiment_id,
        [MetricWrite(1, f"m{i}", 1.0, 0.0) for i in range(5)] + [MetricWrite(2, "m0", 2.0, 0.0)],
    )

    first, after = metrics.page(experiment_id, [], None, limit=3)
    second, last = metrics.page(experiment_id, [], after, limit=3)

    assert [(p.step, p.name) for p in first] == [(1, f"m{i}") for i in range(5)]
    assert after == 1
    assert [(p.step, p.name) for p in second] == [(2, "m0")] and last is None
