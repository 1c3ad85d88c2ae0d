"""The registry of workers: a worker's rows written, refreshed and removed, and who is live."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from core.enums import ResourceClass
from core.models import WorkerRecord
from learners.api import Backend


class WorkerRepository:
    """SQL over ``workers``."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def put(self, rows: Sequence[WorkerRecord]) -> None:
        """Insert each row, or replace the one with its (worker, backend)."""
        for row in rows:
            self.session.merge(row)
        self.session.flush()

    def touch(self, worker_id: str, now: dt.datetime) -> int:
        """Set the worker's rows' ``last_seen_at`` to ``now``; how many rows it has."""
        statement = (
            update(WorkerRecord)
            .where(WorkerRecord.id == worker_id)
            .values(last_seen_at=now)
            .execution_options(synchronize_session=False)
        )
        return int(self.session.execute(statement).rowcount)  # type: ignore[attr-defined]

    def remove(self, worker_id: str) -> int:
        """Delete the worker's rows; how many there were."""
        statement = delete(WorkerRecord).where(WorkerRecord.id == worker_id)
        return int(self.session.execute(statement).rowcount)  # type: ignore[attr-defined]

    def forget_before(self, cutoff: dt.datetime) -> int:
        """Delete the rows last seen before ``cutoff`` (workers long gone); how many."""
        statement = delete(WorkerRecord).where(WorkerRecord.last_seen_at < cutoff)
        return int(self.session.execute(statement).rowcount)  # type: ignore[attr-defined]

    def of(self, worker_id: str) -> list[WorkerRecord]:
        """The worker's rows, freshly read, by backend."""
        query = (
            select(WorkerRecord)
            .where(WorkerRecord.id == worker_id)
            .order_by(WorkerRecord.backend)
            .execution_options(populate_existing=True)
        )
        return list(self.session.scalars(query))

    def live(self, since: dt.datetime) -> list[WorkerRecord]:
        """Every row seen at or after ``since``, by worker and backend."""
        query = (
            select(WorkerRecord)
            .where(WorkerRecord.last_seen_at >= since)
            .order_by(WorkerRecord.id, WorkerRecord.backend)
        )
        return list(self.session.scalars(query))

    def listing(
        self,
        live_since: dt.datetime,
        *,
        backend: Backend | None = None,
        resource: ResourceClass | None = None,
        live: bool | None = None,
    ) -> list[WorkerRecord]:
        """The rows the registry holds, by worker and backend: only ``backend``'s, only those of
        ``resource``'s class, and only the live ones (seen at or after ``live_since``) or only
        the stale ones, when given."""
        query = select(WorkerRecord).order_by(WorkerRecord.id, WorkerRecord.backend)
        if backend is not None:
            query = query.where(WorkerRecord.backend == backend)
        if resource is not None:
            query = query.where(WorkerRecord.resource_class == resource)
        if live is not None:
            seen = WorkerRecord.last_seen_at
            query = query.where(seen >= live_since if live else seen < live_since)
        return list(self.session.scalars(query))

    def suites_served(self, since: dt.datetime) -> dict[Backend, set[str] | None]:
        """Per backend with a worker seen at or after ``since``, the environment suites those
        workers serve together; ``None`` where one of them does not say (a worker from before
        workers reported their suites: it may serve any). One query."""
        query = select(WorkerRecord.backend, WorkerRecord.suites).where(
            WorkerRecord.last_seen_at >= since
        )
        served: dict[Backend, set[str] | None] = {}
        for backend, suites in self.session.execute(query):
            known = served.setdefault(Backend(backend), set())
            if suites is None or known is None:
                served[Backend(backend)] = None
            else:
                known.update(str(s) for s in suites)
        return served

    def backends_with(self, resource: ResourceClass, since: dt.datetime) -> set[Backend]:
        """The backends that a worker of ``resource``'s class seen at or after ``since``
        consumes (one query)."""
        query = (
            select(WorkerRecord.backend)
            .where(WorkerRecord.resource_class == resource, WorkerRecord.last_seen_at >= since)
            .distinct()
        )
        return {Backend(b) for b in self.session.scalars(query)}
