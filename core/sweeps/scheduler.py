"""Starting a sweep's runs: at most ``max_concurrent`` of them queued or running at once.

A sweep's runs wait ``pending`` (stored, not on the broker). ``advance`` moves the oldest pending
ones to ``queued`` and hands them to the broker while the sweep has fewer than ``max_concurrent``
runs queued, running or cancelling, and its project fewer than ``project_max_active_runs``. It runs
right after a sweep is submitted or resumed, and every ``MARLFORGE_SWEEP_INTERVAL_S`` in each API
process (``SweepScheduler``) for the sweeps with pending runs, so a slot freed by a run that ended
is taken within that interval. The sweep's row is locked while it counts and moves, so several API
processes never start more than the limit. A broker that refuses a run puts it, and the runs of the
pass not yet handed over, back to ``pending`` (a sweep is not failed by a broker outage); the
scheduler tries again a minute later. A sweep whose model-based search is still proposing gets its
next configurations first (``core.sweeps.proposals``), and a PBT search its next round once the
last one has ended (``core.sweeps.generations``), when it is given what admits a run.
"""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session, sessionmaker

from core.background import Periodic
from core.dispatch.queue import Dispatcher
from core.enums import ExperimentStatus
from core.errors import BrokerUnavailable
from core.experiments import service as experiments
from core.experiments.repository import ExperimentRepository
from core.lifecycle import transition
from core.quotas import ACTIVE_STATUSES
from core.sweeps.generations import next_round
from core.sweeps.proposals import Admit, propose_runs
from core.sweeps.repository import SweepRepository

log = logging.getLogger(__name__)

S = ExperimentStatus
BROKER_RETRY_S = 60.0
"""After a pass the broker refused, the next one waits this long."""


def advance(
    session: Session,
    dispatcher: Dispatcher,
    sweep_id: str,
    project_max_active: int,
    admit: Admit | None = None,
) -> list[str]:
    """Queue as many of the sweep's pending runs as its ``max_concurrent`` and its project's limit
    allow, oldest first; the ids queued. A broker that refuses fails those runs with the reason
    (resumable), as a submission does. With ``admit``, a search that is still proposing first
    adds the configurations that room allows."""
    sweeps = SweepRepository(session)
    sweep = sweeps.lock(sweep_id)
    if sweep is None:
        session.rollback()
        return []
    active = sweeps.counts([sweep_id])[sweep_id].count(*ACTIVE_STATUSES)
    project_active = ExperimentRepository(session).count_active(sweep.project_id, ACTIVE_STATUSES)
    free = min(sweep.max_concurrent - active, project_max_active - project_active)
    if admit is not None and sweep.proposing:
        if (sweep.spec.get("search") or {}).get("method") == "pbt":
            next_round(session, sweep, admit)
        else:
            propose_runs(session, sweep, admit, max(free, 0))
    started: list[str] = []
    for run_id in sweeps.run_ids(sweep_id, [S.PENDING])[: max(free, 0)]:
        reason = (
            f"started by sweep {sweep_id} ({active + len(started) + 1} of {sweep.max_concurrent})"
        )
        if transition(session, run_id, [S.PENDING], S.QUEUED, reason) is not None:
            started.append(run_id)
    session.commit()
    for index, run_id in enumerate(started):
        try:
            experiments.dispatch(session, dispatcher, experiments.get(session, run_id))
        except BrokerUnavailable as exc:
            _wait_again(session, sweep_id, started[index:], exc)
            raise
    return started


def _wait_again(session: Session, sweep_id: str, run_ids: list[str], exc: Exception) -> None:
    """The broker refused the first of ``run_ids`` (which ``dispatch`` failed) and the rest were
    not tried: all of them wait ``pending`` again, for a pass after the broker is back. A sweep
    does not lose its runs to a broker outage; their timelines say what happened."""
    log.warning("sweep %s: the broker is unreachable; %d run(s) wait again", sweep_id, len(run_ids))
    reason = f"the broker was unreachable ({exc}); waits to be queued again"
    transition(session, run_ids[0], [S.FAILED], S.PENDING, reason, finished_at=None)
    for run_id in run_ids[1:]:
        transition(session, run_id, [S.QUEUED], S.PENDING, reason)
    session.commit()


def advance_all(
    session_factory: sessionmaker[Session],
    dispatcher: Dispatcher,
    project_max_active: int,
    admit: Admit | None = None,
) -> int:
    """``advance`` every sweep that has pending runs or a search still proposing; how many runs
    were queued.
    ``BrokerUnavailable`` when the broker refused one (the pass stops there)."""
    with session_factory() as session:
        waiting = SweepRepository(session).with_pending()
    started = 0
    for sweep_id in waiting:
        with session_factory() as session:
            started += len(advance(session, dispatcher, sweep_id, project_max_active, admit))
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
        admit: Admit | None = None,
    ) -> None:
        super().__init__("sweep-scheduler", interval_s)
        self.session_factory = session_factory
        self.dispatcher = dispatcher
        self.project_max_active = project_max_active
        self.admit = admit

    def work(self) -> float | None:
        try:
            started = advance_all(
                self.session_factory, self.dispatcher, self.project_max_active, self.admit
            )
        except BrokerUnavailable:
            # Each try costs its runs two timeline entries: try again a minute later, not at once.
            return max(self.interval_s, BROKER_RETRY_S)
        if started:
            log.info("started %d pending sweep run(s)", started)
        return None
