"""The database is the queue of record: a queued run whose message the broker does not hold is
sent again.

A broker can lose messages: Redis restarted without its data (a crash, a failover, a lost
volume; even ``appendonly`` loses up to a second of writes), or an API process died between
committing a run ``queued`` and sending its message. Nothing else would ever start such a run: the
reaper looks only at runs a worker held. So each API process runs a ``Reconciler`` beside its
reaper. Every ``reconcile_interval_s`` it reads the runs the database says are queued and have
been for longer than ``dispatch_grace_s`` (since they were queued, or last sent again), asks the
broker which runs it holds a message for (waiting in a queue, or taken by a worker and not yet
acknowledged: ``core.dispatch.queue.held_messages``), and sends a message for each run that has
none, on the queue its spec picks (``core.dispatch.queue.queue_for``), logging it on the run. Queued
matches are reconciled the same way (their ``status_reason`` says so, a match having no events).

Several API processes may run it side by side: the send is preceded by a conditional write of the
run's ``dispatched_at`` (``ExperimentRepository.mark_dispatched``), so one process wins each run
and the next pass leaves the run alone for ``dispatch_grace_s``. A message doubled anyway (a
worker that took it between the two reads) costs nothing: a worker drops the message of a run
that is no longer queued. A broker that cannot be read skips the pass, logged as the broker's
fault; the runs stay queued, nothing fails.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from core.background import Periodic
from core.db import utcnow
from core.dispatch.queue import MATCH_TASK, RUN_TASK, Dispatcher, requested_device, requested_suite
from core.enums import EventKind
from core.experiments.events import EventRepository
from core.experiments.repository import ExperimentRepository
from core.matches.repository import MatchRepository
from core.models import Experiment, Match

log = logging.getLogger(__name__)

BATCH = 500
"""The most runs, and matches, one pass looks at (the oldest first); the next pass takes the
rest."""

RESENT = (
    "its queue message was not in the broker (lost: the broker restarted without its data, or "
    "the API stopped before sending it); sent again"
)


@dataclass(frozen=True)
class Pass:
    """What one pass did: the runs and matches it looked at, and those it sent again."""

    looked_at: int
    resent: tuple[str, ...]
    resent_matches: tuple[str, ...] = ()


def reconcile(
    session_factory: sessionmaker[Session],
    dispatcher: Dispatcher,
    grace_s: float,
    now: dt.datetime | None = None,
) -> Pass | None:
    """One pass (see the module's docstring); None when the broker cannot tell what it holds.
    Raises the broker's error when it cannot be reached, the database's when that cannot."""
    now = now or utcnow()
    cutoff = now - dt.timedelta(seconds=grace_s)
    with session_factory() as session:
        waiting = ExperimentRepository(session).queued_before(cutoff, BATCH)
        waiting_matches = MatchRepository(session).queued_before(cutoff, BATCH)
    if not waiting and not waiting_matches:
        return Pass(0, ())
    held = dispatcher.held_messages()
    if held is None:
        return None
    resent = [
        e.id
        for e in waiting
        if e.id not in held[RUN_TASK] and _resend(session_factory, dispatcher, e, now)
    ]
    resent_matches = [
        m.id
        for m in waiting_matches
        if m.id not in held[MATCH_TASK] and _resend_match(session_factory, dispatcher, m, now)
    ]
    return Pass(len(waiting) + len(waiting_matches), tuple(resent), tuple(resent_matches))


def _resend(
    session_factory: sessionmaker[Session],
    dispatcher: Dispatcher,
    experiment: Experiment,
    now: dt.datetime,
) -> bool:
    with session_factory() as session:
        experiments = ExperimentRepository(session)
        if not experiments.mark_dispatched(experiment, now):
            return False  # started, cancelled, or sent by another API process since it was read
        device, suite = requested_device(experiment.spec), requested_suite(experiment.spec)
        experiments.set_queue(experiment.id, dispatcher.queue_of(experiment.backend, device, suite))
        EventRepository(session).add(
            experiment.id,
            EventKind.LOG,
            {"level": "warning", "message": RESENT, "step": experiment.step},
        )
        session.commit()
    dispatcher.enqueue(experiment.id, experiment.backend, device, suite)
    log.warning("experiment %s: %s", experiment.id, RESENT)
    return True


def _resend_match(
    session_factory: sessionmaker[Session], dispatcher: Dispatcher, match: Match, now: dt.datetime
) -> bool:
    # A match has no events: its status_reason says it (until a worker starts it).
    with session_factory() as session:
        if not MatchRepository(session).mark_dispatched(match, now, RESENT):
            return False
        session.commit()
    dispatcher.enqueue_match(match.id, match.backend, str(match.env.get("suite") or "mpe"))
    log.warning("match %s: %s", match.id, RESENT)
    return True


class Reconciler(Periodic):
    """Runs ``reconcile`` every ``interval_s`` in a daemon thread until ``stop`` (every API
    process runs one)."""

    def __init__(
        self,
        session_factory: sessionmaker[Session],
        dispatcher: Dispatcher,
        grace_s: float,
        interval_s: float,
    ) -> None:
        super().__init__("queue-reconciler", interval_s)
        self.session_factory = session_factory
        self.dispatcher = dispatcher
        self.grace_s = grace_s

    def work(self) -> None:
        try:
            reconcile(self.session_factory, self.dispatcher, self.grace_s)
        except OSError as exc:
            log.warning("%s: the broker is unreachable: %s", self.name, exc)
        except Exception as exc:  # redis and kombu raise several types; all mean "unreachable"
            if type(exc).__module__.split(".")[0] in ("redis", "kombu", "amqp"):
                log.warning("%s: the broker is unreachable: %s", self.name, exc)
            else:
                raise
