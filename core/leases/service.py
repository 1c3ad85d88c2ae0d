"""Leases, lost workers and takeover: a run survives the worker that was training it.

A worker that claims a run holds a **lease** on it: its identity (``worker_id``), the time of its
last heartbeat and when the hold lapses (``lease_expires_at``). The worker renews the lease every
poll interval while the run's process lives (``workers.runs.lease``); a renewal that finds
another worker holding the run tells the worker that the run was taken from it, and it stops the
run's process at once. One that finds nobody holding it (``Hold.RELEASED``: the run's own process
has just recorded its end, or the run was moved on) waits for the process to report, up to the
lease's length: the process can no longer write, and its report says whether to requeue.

A worker that dies (``kill -9``, a preempted node, the kernel's OOM killer, a lost network) stops
renewing. ``reap`` finds the runs whose lease lapsed and moves each on, in one conditional UPDATE
per run (so two reapers, or a worker whose renewal arrives late, cannot both win):

- ``running``: back to ``queued`` with a reason a person can read ("worker w-3 lost at step 32,000;
  restarting from the checkpoint at step 30,000 (restart 1 of 3)") and dispatched again; a worker
  resumes it from its latest checkpoint on the same step axis. After the spec's ``max_restarts``
  takeovers it ends ``failed`` with the same kind of reason (and can still be resumed by hand).
- ``cancelling``: ``cancelled`` (the cancel wins; nobody is left to write a final checkpoint).

A lease that lapsed while the database itself was unreachable is not a lost worker: every lease
lapses then, the workers' renewals failing like everything else, and a worker stops its run once
the lease's length has passed without one. The ``Reaper`` notes when its passes could not reach the
database; a run whose lease lapsed within that outage (or within one lease's length after it) is
queued again with the outage as its reason and spends none of its ``max_restarts``.

Who reaps: the API process (its lifespan starts ``Reaper`` in a thread: ``api.background``), which
runs whenever the service runs, in the embedded mode and in every deployment; several API replicas
may reap at once. Recovery does not wait for the broker's visibility timeout: the old message stays
unacknowledged in the broker and is dropped by whichever worker gets it later (the run is no longer
``queued``).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import secrets
import socket
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from core.background import Periodic
from core.db import utcnow
from core.dispatch.queue import Dispatcher
from core.enums import EventKind, ExperimentStatus
from core.errors import BrokerUnavailable
from core.experiments import service as experiments
from core.experiments.checkpoints import CheckpointRepository
from core.experiments.events import EventRepository
from core.leases.repository import HELD_STATUSES, LeaseRepository, lapsed
from core.lifecycle import transition
from core.models import Experiment
from learners.api import SpecEnvelope

log = logging.getLogger(__name__)

S = ExperimentStatus

DEFAULT_MAX_RESTARTS: int = SpecEnvelope.model_fields["max_restarts"].default
"""Takeovers a run gets when its stored spec predates the field (Determined's default is 5)."""
REAP_BATCH = 100
"""Runs one reaper pass moves on at most (the next pass takes the rest)."""


_STARTED_AS = secrets.token_hex(3)
"""Drawn once per process start: containers on the host's network share its hostname, and a
container restarted by its engine runs its worker under the same small pid, so ``<host>-<pid>``
alone would name a new worker as the one it takes over from."""


def default_worker_id() -> str:
    """``<host>-<pid>-<6 hex digits drawn at start>``: unique among live workers and never a lost
    one's, and says where to look."""
    return f"{socket.gethostname()}-{os.getpid()}-{_STARTED_AS}"


def hold(worker_id: str, ttl_s: float, now: dt.datetime | None = None) -> dict[str, Any]:
    """The column values that give ``worker_id`` the lease (set with the claim's transition); the
    run is no longer an interrupted one (``core.dispatch.fair_share``)."""
    now = now or utcnow()
    return {
        "worker_id": worker_id,
        "heartbeat_at": now,
        "lease_expires_at": now + dt.timedelta(seconds=ttl_s),
        "interrupted_at": None,
    }


RELEASED: dict[str, Any] = {"lease_expires_at": None}
"""The column values that end a lease (set with the transition that ends the hold); the worker's
id and last heartbeat stay, to say who ran it last."""


class Hold(StrEnum):
    """What a renewal found."""

    HELD = "held"
    """The worker holds the run; the lease was extended."""
    RELEASED = "released"
    """Nobody holds the run: it left ``running``/``cancelling``. The worker's own run process
    records its end that way (succeeded, failed, cancelled, or queued again on a shutdown), and a
    reaper or a person may have moved it on; either way its writes, all conditional on the hold,
    can no longer land, so the process stops by itself and reports."""
    TAKEN = "taken"
    """Another worker holds the run now."""


def renew(session_factory: sessionmaker[Session], experiment_id: str, worker_id: str,
          ttl_s: float) -> Hold:  # fmt: skip
    """Extend ``worker_id``'s lease and say what was found. Raises the database's error when it
    cannot be reached (the caller decides how long to keep trying)."""
    now = utcnow()
    with session_factory() as session:
        repository = LeaseRepository(session)
        if repository.renew(experiment_id, worker_id, now, now + dt.timedelta(seconds=ttl_s)):
            session.commit()
            return Hold.HELD
        holder = repository.holder(experiment_id)
    if holder is None or holder[0] not in HELD_STATUSES:
        return Hold.RELEASED
    # Held by this worker but not extended: moved on and claimed again between the two reads.
    return Hold.HELD if holder[1] == worker_id else Hold.TAKEN


@dataclass(frozen=True)
class Outage:
    """When the reaper could not reach the database: between the last pass that reached it and
    the first that did again."""

    start: dt.datetime
    end: dt.datetime

    def covers(self, expired_at: dt.datetime | None, ttl_s: float) -> bool:
        """Whether a lease that lapsed at ``expired_at`` lapsed within the outage, or within one
        lease's length after it (a worker gives its run up a lease's length after its last
        renewal)."""
        if expired_at is None:
            return False
        return self.start <= expired_at <= self.end + dt.timedelta(seconds=ttl_s)

    def describe(self) -> str:
        return (
            f"the database could not be reached between {self.start:%H:%M:%S} and "
            f"{self.end:%H:%M:%S} UTC"
        )


@dataclass(frozen=True)
class Takeover:
    """What ``reap`` did to one run."""

    experiment_id: str
    to: ExperimentStatus
    reason: str


def reap(
    session_factory: sessionmaker[Session],
    dispatcher: Dispatcher,
    ttl_s: float,
    now: dt.datetime | None = None,
    among: list[str] | None = None,
    outage: Outage | None = None,
) -> list[Takeover]:
    """Move on every run whose lease lapsed (only those of ``among`` when given; see the
    module's docstring); return what was done. A run whose lease lapsed within ``outage`` is
    queued again for that reason, its restarts not counted."""
    now = now or utcnow()
    legacy_before = now - dt.timedelta(seconds=ttl_s)
    done: list[Takeover] = []
    with session_factory() as session:
        expired = LeaseRepository(session).lapsed(now, legacy_before, REAP_BATCH, among)
        for experiment in expired:
            away = outage if outage and outage.covers(experiment.lease_expires_at, ttl_s) else None
            takeover = _take_over(session, experiment, now, legacy_before, away)
            session.commit()
            if takeover is None:
                continue
            log.warning("experiment %s: %s", takeover.experiment_id, takeover.reason)
            done.append(takeover)
            if takeover.to == S.QUEUED:
                _dispatch(session, dispatcher, takeover.experiment_id)
    return done


def release_worker(
    session_factory: sessionmaker[Session], dispatcher: Dispatcher, worker_id: str
) -> list[Takeover]:
    """A worker known to be dead (its supervisor saw it exit): end its leases now and reap them,
    without waiting for them to lapse."""
    with session_factory() as session:
        leases = LeaseRepository(session)
        held = leases.held_by(worker_id)
        leases.expire(held, utcnow())
        session.commit()
    return reap(session_factory, dispatcher, ttl_s=0.0, among=held) if held else []


def _take_over(
    session: Session,
    experiment: Experiment,
    now: dt.datetime,
    legacy_before: dt.datetime,
    outage: Outage | None = None,
) -> Takeover | None:
    to, reason, values = _verdict(session, experiment, outage)
    moved = transition(
        session, experiment.id, [experiment.status], to, reason,
        condition=lapsed(now, legacy_before), **values,
    )  # fmt: skip
    if moved is None:
        return None  # renewed, or moved on by someone else, since it was read
    EventRepository(session).add(
        experiment.id,
        EventKind.LOG,
        {"level": "warning", "message": reason, "step": experiment.step},
    )
    return Takeover(experiment.id, to, reason)


def _verdict(
    session: Session, experiment: Experiment, outage: Outage | None = None
) -> tuple[ExperimentStatus, str, dict[str, Any]]:
    """Where a run whose worker was lost (or whose lease lapsed in a database ``outage``) goes,
    why (for a person), and what else changes."""
    lost = f"worker {experiment.worker_id or '(unknown)'} lost at step {experiment.step:,}"
    if outage is not None:
        lost = (
            f"{outage.describe()}; the lease of worker {experiment.worker_id or '(unknown)'} "
            f"lapsed meanwhile at step {experiment.step:,}"
        )
    ended = {**RELEASED, "finished_at": utcnow()}
    if experiment.status == S.CANCELLING:
        return S.CANCELLED, f"{lost} while the run was being cancelled; cancelled", ended
    latest = CheckpointRepository(session).latest(experiment.id)
    start = (
        f"the checkpoint at step {latest.step:,}"
        if latest is not None
        else "the start (no checkpoint was saved)"
    )
    if outage is not None:
        reason = f"{lost}; restarting from {start} (an outage spends no restart)"
        return S.QUEUED, reason, {**RELEASED, "interrupted_at": utcnow()}
    allowed = max_restarts_of(experiment)
    if experiment.restarts >= allowed:
        why = (
            "restarts are off for this run (max_restarts 0)"
            if allowed == 0
            else f"it was restarted {experiment.restarts} of {allowed} times already"
        )
        return S.FAILED, f"{lost}; not restarted: {why}; resume it to continue from {start}", ended
    restart = experiment.restarts + 1
    reason = f"{lost}; restarting from {start} (restart {restart} of {allowed})"
    return S.QUEUED, reason, {**RELEASED, "restarts": restart, "interrupted_at": utcnow()}


def max_restarts_of(experiment: Experiment) -> int:
    """The spec's ``max_restarts`` (specs stored before the field existed get the default)."""
    value = experiment.spec.get("max_restarts", DEFAULT_MAX_RESTARTS)
    return int(value) if isinstance(value, int) else DEFAULT_MAX_RESTARTS


def _dispatch(session: Session, dispatcher: Dispatcher, experiment_id: str) -> None:
    # A broker that cannot take the message fails the run (resumable), as a submission does.
    try:
        experiments.dispatch(session, dispatcher, experiments.get(session, experiment_id))
    except BrokerUnavailable as exc:
        log.error("experiment %s: %s", experiment_id, exc)


class Reaper(Periodic):
    """Runs ``reap`` every ``interval_s`` in a daemon thread until ``stop`` (the API runs one)."""

    def __init__(
        self,
        session_factory: sessionmaker[Session],
        dispatcher: Dispatcher,
        ttl_s: float,
        interval_s: float,
    ) -> None:
        super().__init__("lease-reaper", interval_s)
        self.session_factory = session_factory
        self.dispatcher = dispatcher
        self.ttl_s = ttl_s
        self._last_reached = utcnow()
        self._unreachable = False
        self.outage: Outage | None = None
        """The last database outage this reaper saw, kept until the leases it made lapse have
        been reaped (two lease lengths after it ended)."""

    def work(self) -> None:
        now = utcnow()
        # Should this pass reach the database, an outage ends now.
        outage = Outage(self._last_reached, now) if self._unreachable else self.outage
        if outage and now > outage.end + dt.timedelta(seconds=2 * self.ttl_s):
            outage = None
        try:
            reap(self.session_factory, self.dispatcher, self.ttl_s, now=now, outage=outage)
        except SQLAlchemyError:
            self._unreachable = True
            raise
        self.outage, self._unreachable, self._last_reached = outage, False, now
