"""The status timeline and the event log (``status_transitions``, ``experiment_events``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.db import utcnow
from core.enums import EventKind, ExperimentStatus
from core.models import ExperimentEvent, StatusTransition


class EventRepository:
    """SQL over ``status_transitions`` and ``experiment_events``; callers own the transaction, so an
    event is committed together with the change it records."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, experiment_id: str, kind: EventKind, payload: dict[str, Any]) -> None:
        """Append one event."""
        self.session.add(
            ExperimentEvent(
                experiment_id=experiment_id, kind=kind, payload=payload, created_at=utcnow()
            )
        )

    def add_transition(
        self,
        experiment_id: str,
        from_status: ExperimentStatus | None,
        to_status: ExperimentStatus,
        reason: str | None,
        actor_key_id: str | None = None,
    ) -> None:
        """Record a status change in the timeline and as a ``status`` event."""
        now = utcnow()
        self.session.add(
            StatusTransition(
                experiment_id=experiment_id,
                from_status=from_status,
                to_status=to_status,
                reason=reason,
                actor_key_id=actor_key_id,
                created_at=now,
            )
        )
        payload = {"from": from_status, "to": to_status, "reason": reason}
        self.session.add(
            ExperimentEvent(
                experiment_id=experiment_id,
                kind=EventKind.STATUS,
                payload={k: (str(v) if v is not None else None) for k, v in payload.items()},
                created_at=now,
            )
        )

    def transitions(self, experiment_id: str) -> list[StatusTransition]:
        """The experiment's status timeline, oldest first."""
        query = (
            select(StatusTransition)
            .where(StatusTransition.experiment_id == experiment_id)
            .order_by(StatusTransition.id)
        )
        return list(self.session.scalars(query))

    def events(
        self, experiment_id: str, after_id: int = 0, limit: int = 1000
    ) -> list[ExperimentEvent]:
        """The experiment's events with an id above ``after_id``, oldest first."""
        query = (
            select(ExperimentEvent)
            .where(ExperimentEvent.experiment_id == experiment_id, ExperimentEvent.id > after_id)
            .order_by(ExperimentEvent.id)
            .limit(limit)
        )
        return list(self.session.scalars(query))
