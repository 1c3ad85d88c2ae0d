"""Whole metric series of several runs, for charts and exports (``metric_points``)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.downsample import Point
from core.models import Experiment, MetricPointRow


class SeriesRepository:
    """Read-only SQL over ``metric_points`` by (experiment, name)."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def existing(self, experiment_ids: Sequence[str], project_id: str) -> set[str]:
        """Which of these experiments exist in the project."""
        query = select(Experiment.id).where(
            Experiment.id.in_(list(experiment_ids)), Experiment.project_id == project_id
        )
        return set(self.session.scalars(query))

    def names(self, experiment_ids: Sequence[str]) -> list[tuple[str, str]]:
        """Every (experiment, metric name) pair that has points, ordered by name."""
        query = (
            select(MetricPointRow.experiment_id, MetricPointRow.name)
            .where(MetricPointRow.experiment_id.in_(list(experiment_ids)))
            .distinct()
            .order_by(MetricPointRow.name, MetricPointRow.experiment_id)
        )
        return [(e, n) for e, n in self.session.execute(query)]

    def points(self, experiment_id: str, name: str) -> list[Point]:
        """The whole series ``name`` of the experiment, ordered by step."""
        query = (
            select(MetricPointRow.step, MetricPointRow.value, MetricPointRow.wall_time)
            .where(MetricPointRow.experiment_id == experiment_id, MetricPointRow.name == name)
            .order_by(MetricPointRow.step)
        )
        return [
            Point(int(s), None if v is None else float(v), float(w))
            for s, v, w in self.session.execute(query)
        ]
