"""Counts over every project for the service's monitoring (``GET /metrics``): runs by status and
backend, lost workers and the restarts they caused, and failed runs by why they failed.

Each method is one query whose answer is a handful of rows, however many runs are stored; a
scrape calls each once. ``status_transitions`` has no index on ``reason``, so ``lost_workers`` scans
that table at every scrape: its cost grows with the number of status changes ever recorded.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from core.enums import ExperimentStatus, FailureClass
from core.models import Experiment, StatusTransition
from learners.api import Backend

LOST_WORKER_REASON = "worker % lost at step %"
"""A ``LIKE`` pattern for the reason of every takeover (``core.leases``: "worker w-3 lost at step
32,000; restarting from ...", or "...; not restarted: ..." when the run fails instead)."""

FAILURE_REASONS: tuple[tuple[FailureClass, str], ...] = (
    (FailureClass.LOST_WORKER, LOST_WORKER_REASON),
    # workers.runs.held, for a run its worker stopped or whose process died.
    (FailureClass.OVER_MEMORY, "%above its memory budget%"),
    (FailureClass.TIME_LIMIT, "%exceeded the time limit%"),
    (FailureClass.PROCESS_DIED, "%process died%"),
    (FailureClass.NONFINITE_LOSS, "%non-finite loss%"),
    # core.experiments.service.dispatch: the submission or resume was stored but could not be
    # queued.
    (FailureClass.BROKER_UNREACHABLE, "%broker is unreachable%"),
)
"""How a failed run's ``status_reason`` is classified: the first pattern that matches wins, and a
reason that matches none (or no reason) is ``FailureClass.ERROR``. The patterns follow the reasons
the service writes; a new kind of reason needs a class here or it counts as ``error``."""


@dataclass(frozen=True)
class LostWorkers:
    """What lost workers did to runs, over every run stored."""

    takeovers: int
    """Runs taken from a lost worker: requeued, or failed or cancelled when not restarted."""
    restarts: int
    """Takeovers that queued the run again (the sum of ``experiments.restarts``)."""


class StatsRepository:
    """Aggregates over ``experiments`` and ``status_transitions`` (all projects)."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def runs_by_status_and_backend(self) -> dict[tuple[ExperimentStatus, Backend], int]:
        """How many runs are in each (status, backend); pairs with none are absent."""
        query = select(Experiment.status, Experiment.backend, func.count()).group_by(
            Experiment.status, Experiment.backend
        )
        return {(status, backend): count for status, backend, count in self.session.execute(query)}

    def lost_workers(self) -> LostWorkers:
        """Takeovers (transitions with a lost worker's reason) and restarts, in one query."""
        takeovers = (
            select(func.count())
            .select_from(StatusTransition)
            .where(StatusTransition.reason.like(LOST_WORKER_REASON))
            .scalar_subquery()
        )
        restarts = select(func.coalesce(func.sum(Experiment.restarts), 0)).scalar_subquery()
        row = self.session.execute(select(takeovers, restarts)).one()
        return LostWorkers(takeovers=int(row[0]), restarts=int(row[1]))

    def failed_by_class(self) -> dict[FailureClass, int]:
        """How many runs are ``failed``, by the class of their reason (``FAILURE_REASONS``);
        classes with none are absent."""
        reason = func.coalesce(Experiment.status_reason, "")
        failure = case(
            *((reason.like(pattern), kind.value) for kind, pattern in FAILURE_REASONS),
            else_=FailureClass.ERROR.value,
        )
        # Classified in a subquery and grouped outside it: PostgreSQL would not see a CASE with
        # bound parameters in SELECT and in GROUP BY as the same expression.
        failed = (
            select(failure.label("failure"))
            .where(Experiment.status == ExperimentStatus.FAILED)
            .subquery()
        )
        query = select(failed.c.failure, func.count()).group_by(failed.c.failure)
        return {FailureClass(kind): count for kind, count in self.session.execute(query)}
