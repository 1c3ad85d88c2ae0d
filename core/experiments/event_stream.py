"""Reads of the event log for streams: the events after a cursor, a stream's starting point, and
which experiments have news (``experiment_events``, written by ``EventRepository``).

Per experiment, events commit in id order (migration 0002 on PostgreSQL; SQLite has one writer at a
time), so "every event with an id above N" read now is complete: no event at or below N can appear
later. Everything here relies on that.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core.enums import EventKind
from core.models import Experiment, ExperimentEvent


@dataclass(frozen=True)
class StoredEvent:
    """One committed event, detached from any session."""

    id: int
    experiment_id: str
    kind: EventKind
    payload: dict[str, Any]
    created_at: dt.datetime

    @classmethod
    def of(cls, row: ExperimentEvent) -> StoredEvent:
        """The event of a database row."""
        return cls(
            row.id, row.experiment_id, EventKind(row.kind), dict(row.payload), row.created_at
        )


@dataclass(frozen=True)
class StreamHead:
    """Where an experiment's event log stands: its newest event id and the status it records."""

    last_id: int
    status: str | None
    """The ``to`` of the newest status event at or below ``last_id``; None when there is none."""


class EventStreamRepository:
    """Read-only SQL over ``experiment_events`` for streams and pollers."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def after(
        self,
        experiment_id: str,
        after_id: int,
        limit: int,
        kinds: Collection[EventKind] = (),
    ) -> list[StoredEvent]:
        """Up to ``limit`` events with an id above ``after_id``, oldest first (only ``kinds``, if
        given)."""
        query = (
            select(ExperimentEvent)
            .where(ExperimentEvent.experiment_id == experiment_id, ExperimentEvent.id > after_id)
            .order_by(ExperimentEvent.id)
            .limit(limit)
        )
        if kinds:
            query = query.where(ExperimentEvent.kind.in_(list(kinds)))
        return [StoredEvent.of(row) for row in self.session.scalars(query)]

    def head(self, experiment_id: str) -> StreamHead | None:
        """The experiment's newest event id and its status as of that event; None when the
        experiment does not exist."""
        if self.session.get(Experiment, experiment_id) is None:
            return None
        # The id first, then the status at or below it: a transition committed in between is
        # above the id and is read as an ordinary event later.
        last_id = self.session.scalar(
            select(func.max(ExperimentEvent.id)).where(
                ExperimentEvent.experiment_id == experiment_id
            )
        )
        if last_id is None:
            return StreamHead(0, None)
        payload = self.session.scalar(
            select(ExperimentEvent.payload)
            .where(
                ExperimentEvent.experiment_id == experiment_id,
                ExperimentEvent.kind == EventKind.STATUS,
                ExperimentEvent.id <= last_id,
            )
            .order_by(ExperimentEvent.id.desc())
            .limit(1)
        )
        return StreamHead(int(last_id), None if payload is None else payload.get("to"))

    def latest_ids(self, experiment_ids: Sequence[str]) -> dict[str, int]:
        """The newest event id of each of these experiments that has events."""
        if not experiment_ids:
            return {}
        query = (
            select(ExperimentEvent.experiment_id, func.max(ExperimentEvent.id))
            .where(ExperimentEvent.experiment_id.in_(list(experiment_ids)))
            .group_by(ExperimentEvent.experiment_id)
        )
        return {experiment_id: int(last) for experiment_id, last in self.session.execute(query)}

    def last_id(self, experiment_id: str) -> int:
        """The experiment's newest event id (0 when it has none)."""
        value = self.session.scalar(
            select(func.max(ExperimentEvent.id)).where(
                ExperimentEvent.experiment_id == experiment_id
            )
        )
        return int(value or 0)
