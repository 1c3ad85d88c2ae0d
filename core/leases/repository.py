"""Leases on running experiments: renewal by their worker, and the ones that lapsed."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy import ColumnElement, and_, func, or_, select, update
from sqlalchemy.orm import Session

from core.enums import ExperimentStatus
from core.models import Experiment

S = ExperimentStatus

HELD_STATUSES = (S.RUNNING, S.CANCELLING)
"""The statuses in which a worker holds the run (and must keep renewing its lease)."""


def lapsed(now: dt.datetime, legacy_before: dt.datetime) -> ColumnElement[bool]:
    """True for a held run whose lease ran out before ``now``. A run started before leases existed
    has none: it counts as lapsed once its last write (``updated_at``) is older than
    ``legacy_before``."""
    return or_(
        Experiment.lease_expires_at < now,
        and_(Experiment.lease_expires_at.is_(None), Experiment.updated_at < legacy_before),
    )


class LeaseRepository:
    """SQL over the lease columns of ``experiments``."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def renew(
        self, experiment_id: str, worker_id: str, now: dt.datetime, until: dt.datetime
    ) -> bool:
        """Extend ``worker_id``'s hold to ``until``; False when it no longer holds the run (another
        worker took it over, or it ended or was moved on)."""
        statement = (
            update(Experiment)
            .where(
                Experiment.id == experiment_id,
                Experiment.worker_id == worker_id,
                Experiment.status.in_(HELD_STATUSES),
            )
            .values(heartbeat_at=now, lease_expires_at=until)
            .execution_options(synchronize_session=False)
        )
        return self.session.execute(statement).rowcount == 1  # type: ignore[attr-defined,no-any-return]

    def lapsed(
        self,
        now: dt.datetime,
        legacy_before: dt.datetime,
        limit: int,
        among: Sequence[str] | None = None,
    ) -> list[Experiment]:
        """Held runs whose lease lapsed (only those of ``among`` when given), the longest silent
        first."""
        query = (
            select(Experiment)
            .where(Experiment.status.in_(HELD_STATUSES), lapsed(now, legacy_before))
            .order_by(Experiment.lease_expires_at, Experiment.id)
            .limit(limit)
        )
        if among is not None:
            query = query.where(Experiment.id.in_(list(among)))
        return list(self.session.scalars(query))

    def holder(self, experiment_id: str) -> tuple[ExperimentStatus, str | None] | None:
        """The run's status and the worker it names (None: no such run)."""
        row = self.session.execute(
            select(Experiment.status, Experiment.worker_id).where(Experiment.id == experiment_id)
        ).first()
        return None if row is None else (row[0], row[1])

    def held_by(self, worker_id: str) -> list[str]:
        """Ids of the runs ``worker_id`` holds."""
        query = select(Experiment.id).where(
            Experiment.worker_id == worker_id, Experiment.status.in_(HELD_STATUSES)
        )
        return list(self.session.scalars(query))

    def expire(self, experiment_ids: list[str], now: dt.datetime) -> None:
        """End the leases of these runs now (their worker is known to be dead)."""
        if not experiment_ids:
            return
        self.session.execute(
            update(Experiment)
            .where(Experiment.id.in_(experiment_ids), Experiment.status.in_(HELD_STATUSES))
            .values(lease_expires_at=now - dt.timedelta(microseconds=1))
            .execution_options(synchronize_session=False)
        )

    def queue_position(
        self, experiment: Experiment, cuda: bool | None = None, suite: str | None = None
    ) -> int:
        """1 for the next run its queue's workers take, 2 for the one after, ...: the queued runs
        of its backend (and, given ``suite``, of that environment suite: a queue of its own) are
        taken in the order they were queued. A backend with a GPU queue has two queues: ``cuda``
        True counts only the runs whose spec asks for ``cuda`` (its GPU queue), False only the
        others; None counts every run of the backend."""
        same_queue: list[ColumnElement[bool]] = []
        if cuda is not None:
            device = Experiment.spec["device"].as_string()
            asks_cuda = device == "cuda"
            same_queue.append(asks_cuda if cuda else or_(device.is_(None), ~asks_cuda))
        if suite is not None:
            same_queue.append(Experiment.spec["env"]["suite"].as_string() == suite)
        ahead = select(func.count()).where(
            Experiment.status == S.QUEUED,
            Experiment.backend == experiment.backend,
            *same_queue,
            or_(
                Experiment.updated_at < experiment.updated_at,
                and_(Experiment.updated_at == experiment.updated_at, Experiment.id < experiment.id),
            ),
        )
        return int(self.session.scalar(ahead) or 0) + 1
