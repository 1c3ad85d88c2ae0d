"""Experiments: insert, read, list with a cursor, and change status only from an expected status."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, delete, func, insert, or_, select, update
from sqlalchemy.orm import Session

from core.db import utcnow
from core.enums import ExperimentStatus
from core.models import Experiment, ExperimentTag, StatusTransition
from learners.api import Algorithm, Backend


@dataclass(frozen=True)
class ExperimentFilter:
    """The optional filters of the experiment listing."""

    project_id: str
    status: ExperimentStatus | None = None
    algorithm: Algorithm | None = None
    backend: Backend | None = None
    tag: str | None = None
    """Only experiments with exactly this tag."""
    name_contains: str | None = None
    """Only experiments whose name holds this text, ignoring case."""
    sweep_id: str | None = None
    """Only the runs of this sweep."""


class ExperimentRepository:
    """SQL over ``experiments``."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, experiment: Experiment) -> None:
        """Stage a new experiment for insertion."""
        self.session.add(experiment)
        self.session.flush()

    def get(self, experiment_id: str) -> Experiment | None:
        """The experiment, freshly read from the database, or None."""
        return self.session.get(Experiment, experiment_id, populate_existing=True)

    def project_of(self, experiment_id: str) -> str | None:
        """The id of the experiment's project, or None when it does not exist."""
        return self.session.scalar(
            select(Experiment.project_id).where(Experiment.id == experiment_id)
        )

    def count_active(self, project_id: str, statuses: Sequence[ExperimentStatus]) -> int:
        """How many of the project's experiments are in one of ``statuses``."""
        query = select(func.count()).where(
            Experiment.project_id == project_id, Experiment.status.in_(statuses)
        )
        return int(self.session.scalar(query) or 0)

    def resumed_since(self, project_id: str, since: dt.datetime) -> list[dt.datetime]:
        """When each resume (by a key: cancelled or failed -> queued or pending) of the project's
        runs after ``since`` was."""
        query = (
            select(StatusTransition.created_at)
            .join(Experiment, Experiment.id == StatusTransition.experiment_id)
            .where(
                Experiment.project_id == project_id,
                StatusTransition.created_at > since,
                StatusTransition.from_status.in_(
                    [ExperimentStatus.CANCELLED, ExperimentStatus.FAILED]
                ),
                StatusTransition.to_status.in_([ExperimentStatus.QUEUED, ExperimentStatus.PENDING]),
            )
        )
        return list(self.session.scalars(query))

    def created_since(self, project_id: str, since: dt.datetime) -> list[dt.datetime]:
        """When each of the project's experiments submitted on their own (not by a sweep) after
        ``since`` was, oldest first."""
        query = (
            select(Experiment.created_at)
            .where(
                Experiment.project_id == project_id,
                Experiment.created_at > since,
                Experiment.sweep_id.is_(None),
            )
            .order_by(Experiment.created_at)
        )
        return list(self.session.scalars(query))

    def status_of(self, experiment_id: str) -> ExperimentStatus | None:
        """Only the status (the cheap read a running job polls)."""
        return self.session.scalar(select(Experiment.status).where(Experiment.id == experiment_id))

    def holder(self, experiment_id: str) -> tuple[ExperimentStatus | None, str | None]:
        """The status and the worker holding the run, the row locked until the transaction ends
        (on PostgreSQL; SQLite's writes are serialised anyway); ``(None, None)`` when it is gone."""
        row = self.session.execute(
            select(Experiment.status, Experiment.worker_id)
            .where(Experiment.id == experiment_id)
            .with_for_update()
        ).first()
        return (None, None) if row is None else (row[0], row[1])

    def page(self, flt: ExperimentFilter, limit: int, after: str | None) -> list[Experiment]:
        """Up to ``limit`` experiments, newest first, older than the one with id ``after``."""
        query = (
            select(Experiment)
            .where(Experiment.project_id == flt.project_id)
            .order_by(Experiment.id.desc())
            .limit(limit)
        )
        if after is not None:
            query = query.where(Experiment.id < after)
        if flt.status is not None:
            query = query.where(Experiment.status == flt.status)
        if flt.algorithm is not None:
            query = query.where(Experiment.algorithm == flt.algorithm)
        if flt.backend is not None:
            query = query.where(Experiment.backend == flt.backend)
        if flt.tag is not None:
            tagged = select(ExperimentTag.experiment_id).where(ExperimentTag.tag == flt.tag)
            query = query.where(Experiment.id.in_(tagged))
        if flt.sweep_id is not None:
            query = query.where(Experiment.sweep_id == flt.sweep_id)
        if flt.name_contains is not None:
            query = query.where(Experiment.name.icontains(flt.name_contains, autoescape=True))
        return list(self.session.scalars(query))

    def set_tags(self, experiment_id: str, tags: Sequence[str]) -> None:
        """Make ``tags`` the experiment's indexed tags (its spec holds the same list)."""
        mine = ExperimentTag.experiment_id == experiment_id
        self.session.execute(delete(ExperimentTag).where(mine))
        if tags:
            rows = [{"experiment_id": experiment_id, "tag": tag} for tag in tags]
            self.session.execute(insert(ExperimentTag), rows)

    def set_labels(self, experiment_id: str, name: str, spec: dict[str, Any]) -> None:
        """Store an edited name and the spec holding it (with its tags and notes)."""
        self.session.execute(
            update(Experiment)
            .where(Experiment.id == experiment_id)
            .values(name=name, spec=spec, updated_at=utcnow())
            .execution_options(synchronize_session=False)
        )

    def ids_with_status(self, statuses: Sequence[ExperimentStatus]) -> list[str]:
        """Ids of every experiment in one of ``statuses``, oldest first."""
        query = select(Experiment.id).where(Experiment.status.in_(statuses)).order_by(Experiment.id)
        return list(self.session.scalars(query))

    def queued_before(self, cutoff: dt.datetime, limit: int) -> list[Experiment]:
        """Queued runs that were queued, and last sent again (``dispatched_at``), before
        ``cutoff``; in the order they were queued."""
        query = (
            select(Experiment)
            .where(
                Experiment.status == ExperimentStatus.QUEUED,
                Experiment.updated_at < cutoff,
                or_(Experiment.dispatched_at.is_(None), Experiment.dispatched_at < cutoff),
            )
            .order_by(Experiment.updated_at, Experiment.id)
            .limit(limit)
        )
        return list(self.session.scalars(query))

    def mark_dispatched(self, experiment: Experiment, now: dt.datetime) -> bool:
        """Set ``dispatched_at`` only if the run is still queued as it was read (its
        ``updated_at`` and ``dispatched_at`` unchanged): of several processes, one wins. Leaves
        ``updated_at`` (the run's place in its queue) as it is."""
        seen = (
            Experiment.dispatched_at.is_(None)
            if experiment.dispatched_at is None
            else Experiment.dispatched_at == experiment.dispatched_at
        )
        statement = (
            update(Experiment)
            .where(
                Experiment.id == experiment.id,
                Experiment.status == ExperimentStatus.QUEUED,
                Experiment.updated_at == experiment.updated_at,
                seen,
            )
            .values(dispatched_at=now)
            .execution_options(synchronize_session=False)
        )
        return self.session.execute(statement).rowcount == 1  # type: ignore[attr-defined,no-any-return]

    def change_status(
        self,
        experiment_id: str,
        expected: ExperimentStatus,
        to: ExperimentStatus,
        reason: str | None,
        values: dict[str, Any],
        condition: ColumnElement[bool] | None = None,
    ) -> bool:
        """Set ``to`` only if the status is still ``expected`` (and ``condition`` holds); True when
        the row changed.

        The condition is in the UPDATE itself, so a cancel and a worker's claim racing on the same
        row cannot both win.
        """
        where = [Experiment.id == experiment_id, Experiment.status == expected]
        if condition is not None:
            where.append(condition)
        statement = (
            update(Experiment)
            .where(*where)
            .values(status=to, status_reason=reason, updated_at=utcnow(), **values)
            .execution_options(synchronize_session=False)
        )
        return self.session.execute(statement).rowcount == 1  # type: ignore[attr-defined,no-any-return]

    def set_progress(self, experiment_id: str, step: int, latest: dict[str, Any] | None) -> None:
        """Record the run's step and, when given, its latest metric values."""
        values: dict[str, Any] = {"step": step, "updated_at": utcnow()}
        if latest is not None:
            values["latest_metrics"] = latest
        self.session.execute(
            update(Experiment)
            .where(Experiment.id == experiment_id)
            .values(**values)
            .execution_options(synchronize_session=False)
        )

    def set_queue(self, experiment_id: str, queue: str) -> None:
        """Record the queue the queued run's message goes to (``core.dispatch.fair_share``). Leaves
        ``updated_at`` (the run's place in its queue) as it is."""
        self.session.execute(
            update(Experiment)
            .where(Experiment.id == experiment_id, Experiment.status == ExperimentStatus.QUEUED)
            .values(queue=queue)
            .execution_options(synchronize_session=False)
        )

    def set_device(self, experiment_id: str, worker_id: str, device: str) -> bool:
        """Record the device ``worker_id`` runs the experiment on; False when that worker no
        longer holds it."""
        statement = (
            update(Experiment)
            .where(Experiment.id == experiment_id, Experiment.worker_id == worker_id)
            .values(device=device)
            .execution_options(synchronize_session=False)
        )
        return self.session.execute(statement).rowcount == 1  # type: ignore[attr-defined,no-any-return]
