"""Starting a sweep's runs: at most ``max_concurrent`` of them queued or running at once.

A sweep's runs wait ``pending`` (stored, not on the broker). ``advance`` moves the oldest pending
ones to ``queued`` and hands them to the broker while the sweep has fewer than ``max_concurrent``
runs queued, running or cancelling, and its project fewer than ``project_max_active_runs``. It runs
right after a sweep is submitted or resumed, and every ``MARLFORGE_SWEEP_INTERVAL_S`` in each API
process (``SweepScheduler``) for the sweeps with pending runs, so a slot freed by a run that ended
is taken within that interval. The sweep's row is locked while it counts and moves, so several API
processes never start more than the limit.
"""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session, sessionmaker

from core import experiments
from core.background import Periodic
from core.enums import ExperimentStatus
from core.errors import BrokerUnavailable
from core.lifecycle import transition
from core.queue import Dispatcher
from core.quotas import ACTIVE_STATUSES
from core.repositories import ExperimentRepository
from core.repositories.sweeps import SweepRepository

log = logging.getLogger(__name__)

S = ExperimentStatus


def advance(
    session: Session, dispatcher: Dispatcher, sweep_id: str, project_max_active: int
) -> list[str]:
    """Queue as many of the sweep's pending runs as its ``max_concurrent`` and its project's limit
    allow, oldest first; the ids queued. A broker that refuses fails those runs with the reason
    (resumable), as a submission does."""
    sweeps = SweepRepository(session)
    sweep = sweeps.lock(sweep_id)
    if sweep is None:
        session.rollback()
        return []
    active = sweeps.counts([sweep_id])[sweep_id].count(*ACTIVE_STATUSES)
    project_active = ExperimentRepository(session).count_active(sweep.project_id, ACTIVE_STATUSES)
    free = min(sweep.max_concurrent - active, project_max_active - project_active)
    started: list[str] = []
    for run_id in sweeps.run_ids(sweep_id, [S.PENDING])[: max(free, 0)]:
        reason = (
            f"started by sweep {sweep_id} ({active + len(started) + 1} of {sweep.max_concurrent})"
        )
        if transition(session, run_id, [S.PENDING], S.QUEUED, reason) is not None:
            started.append(run_id)
    session.commit()
    for run_id in started:
        try:
            experiments.dispatch(session, dispatcher, experiments.get(session, run_id))
        except BrokerUnavailable as exc:
            log.error("sweep %s: run %s: %s", sweep_id, run_id, exc)
    return started


def advance_all(
    session_factory: sessionmaker[Session], dispatcher: Dispatcher, project_max_active: int
) -> int:
    """``advance`` every sweep that has pending runs; how many runs were queued."""
    with session_factory() as session:
        waiting = SweepRepository(session).with_pending()
    started = 0
    for sweep_id in waiting:
        with session_factory() as session:
            started += len(advance(session, dispatcher, sweep_id, project_max_active))
    return started


class SweepScheduler(Periodic):
    """Runs ``advance_all`` every ``interval_s`` in a daemon thread until ``stop`` (each API
    process runs one)."""

    def __init__(
        self,
        session_factory: sessionmaker[Session],
        dispatcher: Dispatcher,
        project_max_active: int,
        interval_s: float,
    ) -> None:
        super().__init__("sweep-scheduler", interval_s)
        self.session_factory = session_factory
        self.dispatcher = dispatcher
        self.project_max_active = project_max_active

    def work(self) -> None:
        started = advance_all(self.session_factory, self.dispatcher, self.project_max_active)
        if started:
            log.info("started %d pending sweep run(s)", started)
