"""The SQL of compaction (``core.retention``): which finished runs are due, and deleting their
progress and metrics events and the thinned-out points of their long series, a bounded batch at a
time."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence

from sqlalchemy import ColumnElement, delete, func, or_, select, update
from sqlalchemy.orm import Session

from core.enums import TERMINAL_STATUSES, EventKind
from core.metrics.tier_repository import TierRepository
from core.models import Experiment, ExperimentEvent, MetricPointRow


def _due(cutoff: dt.datetime) -> ColumnElement[bool]:
    """Finished before ``cutoff`` and not compacted since it last finished (a run resumed after
    its compaction is compacted again once it ends)."""
    return (
        Experiment.status.in_(sorted(TERMINAL_STATUSES))
        & (Experiment.finished_at < cutoff)
        & or_(Experiment.compacted_at.is_(None), Experiment.compacted_at < Experiment.finished_at)
    )


class RetentionRepository:
    """SQL over ``experiments``, ``experiment_events`` and ``metric_points`` for compaction; the
    caller commits each batch."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def due(self, cutoff: dt.datetime, limit: int, after_id: str = "") -> list[str]:
        """Up to ``limit`` runs due for compaction (see ``_due``) with an id above ``after_id``,
        oldest first."""
        query = select(Experiment.id).where(_due(cutoff), Experiment.id > after_id)
        return list(self.session.scalars(query.order_by(Experiment.id).limit(limit)))

    def hold_if_due(self, experiment_id: str, cutoff: dt.datetime) -> bool:
        """True when the run is still due, its row locked until the transaction ends (on
        PostgreSQL; SQLite serialises writers anyway): a resume waits for this batch, and the
        next batch sees it and stops."""
        query = (
            select(Experiment.id)
            .where(Experiment.id == experiment_id, _due(cutoff))
            .with_for_update()
        )
        return self.session.scalar(query) is not None

    def delete_events(
        self, experiment_id: str, kinds: Collection[EventKind], after_id: int, limit: int
    ) -> list[int]:
        """Delete up to ``limit`` of the run's events of ``kinds`` with an id above ``after_id``
        (oldest first); their ids."""
        ids = list(
            self.session.scalars(
                select(ExperimentEvent.id)
                .where(
                    ExperimentEvent.experiment_id == experiment_id,
                    ExperimentEvent.id > after_id,
                    ExperimentEvent.kind.in_(sorted(kinds)),
                )
                .order_by(ExperimentEvent.id)
                .limit(limit)
            )
        )
        if ids:
            self.session.execute(delete(ExperimentEvent).where(ExperimentEvent.id.in_(ids)))
        return ids

    def longer_than(self, experiment_id: str, name: str, count: int) -> bool:
        """True when the series holds more than ``count`` points (reads at most ``count + 1``)."""
        head = (
            select(MetricPointRow.id)
            .where(MetricPointRow.experiment_id == experiment_id, MetricPointRow.name == name)
            .limit(count + 1)
            .subquery()
        )
        return int(self.session.scalar(select(func.count()).select_from(head)) or 0) > count

    def point_page(
        self, experiment_id: str, name: str, after_step: int | None, limit: int
    ) -> list[tuple[int, int]]:
        """(id, step) of up to ``limit`` points of the series after ``after_step``, by step."""
        query = select(MetricPointRow.id, MetricPointRow.step).where(
            MetricPointRow.experiment_id == experiment_id, MetricPointRow.name == name
        )
        if after_step is not None:
            query = query.where(MetricPointRow.step > after_step)
        rows = self.session.execute(query.order_by(MetricPointRow.step).limit(limit))
        return [(int(i), int(s)) for i, s in rows]

    def delete_points(
        self, experiment_id: str, name: str, points: Sequence[tuple[int, int]]
    ) -> None:
        """Delete these (id, step) points of the series, and summarise what is left there again."""
        if not points:
            return
        ids = [point_id for point_id, _ in points]
        self.session.execute(delete(MetricPointRow).where(MetricPointRow.id.in_(ids)))
        steps = [step for _, step in points]
        TierRepository(self.session).refresh(experiment_id, [name], min(steps), max(steps))

    def mark_compacted(self, experiment_id: str, at: dt.datetime) -> None:
        """Record that the run's compaction is complete."""
        self.session.execute(
            update(Experiment)
            .where(Experiment.id == experiment_id)
            .values(compacted_at=at)
            .execution_options(synchronize_session=False)
        )
