"""Helpers of the retention tests: the test's database, runs built the way a worker writes them
(transitions, metric batches, events, checkpoint records) and aged by their ``finished_at``, and a
counter of the rows each transaction deletes."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, event
from sqlalchemy.orm import Session, sessionmaker

from core.db import utcnow
from core.dispatch.queue import CeleryDispatcher
from core.enums import EventKind, ExperimentStatus
from core.experiments import service as experiments
from core.experiments.checkpoints import CheckpointRepository
from core.experiments.events import EventRepository
from core.lifecycle import transition
from core.metrics.downsample import Point
from core.metrics.repository import MetricRepository, MetricWrite
from core.settings import Settings
from learners.admission.parse import parse_spec
from tests import series_support
from tests.auth_support import default_project_id

S = ExperimentStatus


@dataclass
class Db:
    """The test's database: its URL, its sessions, and what they execute on (for listeners)."""

    url: str
    sessions: sessionmaker[Session]
    bind: Engine | Connection


def noisy(seed: int, length: int) -> list[Point]:
    """A long-period noisy series (``tests.series_support.noisy``): retention's cases."""
    return series_support.noisy(seed, length, period=400)


@dataclass(frozen=True)
class RunShape:
    """What a built run holds and where it ended."""

    series: dict[str, list[Point]]
    reports: int = 200
    """How many progress events and metrics events (each) it wrote."""
    status: ExperimentStatus = S.SUCCEEDED
    finished_days_ago: float = 40.0


def build_run(session: Session, settings: Settings, spec: dict[str, Any], shape: RunShape) -> str:
    """A run written as a worker writes one: points in batches, with a ``progress`` and a
    ``metrics`` event per report, a ``log`` event every 40, a checkpoint (record and event) every
    50, and its transitions; a terminal run's ``finished_at`` is ``finished_days_ago`` back."""
    run = experiments.submit(
        session, CeleryDispatcher(settings), parse_spec(spec), default_project_id(session)
    )
    transition(session, run.id, [S.QUEUED], S.RUNNING, None, started_at=utcnow())
    writes = sorted(
        (
            MetricWrite(p.step, n, p.value, p.wall_time)
            for n, ps in shape.series.items()
            for p in ps
        ),
        key=lambda w: (w.step, w.name),
    )
    for start in range(0, len(writes), 5000):
        MetricRepository(session).write(run.id, writes[start : start + 5000])
    events = EventRepository(session)
    for k in range(shape.reports):
        events.add(run.id, EventKind.PROGRESS, {"step": k, "total_steps": shape.reports})
        events.add(run.id, EventKind.METRICS, {"points": [{"step": k, "name": "x", "value": 1.0}]})
        if k % 40 == 0:
            events.add(run.id, EventKind.LOG, {"level": "info", "message": f"at {k}", "step": k})
        if k % 50 == 49:
            row = CheckpointRepository(session).record(run.id, k, f"{run.id}/{k}", 10, "0" * 64)
            events.add(run.id, EventKind.CHECKPOINT, {"id": row.id, "step": k, "pruned": []})
    if shape.status.is_terminal:
        finished = utcnow() - dt.timedelta(days=shape.finished_days_ago)
        transition(session, run.id, [S.RUNNING], shape.status, "ended", finished_at=finished)
    elif shape.status != S.RUNNING:
        transition(session, run.id, [S.RUNNING], shape.status, "asked")
    session.commit()
    return run.id


class DeleteCounter:
    """Points and events deleted in each committed transaction of ``sessions`` (to hold
    compaction's batches to their bound; the summaries of ``metric_tiers`` a batch rewrites are
    not counted)."""

    TABLES = ("metric_points", "experiment_events")

    def __init__(self, db: Db) -> None:
        self.current = 0
        self.per_transaction: list[int] = []
        event.listen(db.bind, "after_cursor_execute", self._executed)
        event.listen(db.sessions, "after_commit", self._committed)

    def _executed(self, _conn: Any, cursor: Any, statement: str, *_args: Any) -> None:
        words = statement.split()
        if [w.upper() for w in words[:2]] == ["DELETE", "FROM"] and words[2] in self.TABLES:
            self.current += cursor.rowcount

    def _committed(self, _session: Session) -> None:
        self.per_transaction.append(self.current)
        self.current = 0
