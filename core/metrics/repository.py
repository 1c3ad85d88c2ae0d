"""Metric points: written a batch per statement, read a page of whole steps at a time; every write
and delete keeps the series' summaries (``core.metrics.tier_repository``) right in its
transaction."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Insert, delete, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from core.metrics.downsample import Point
from core.metrics.series import SeriesRepository
from core.metrics.tier_repository import TierRepository
from core.models import MetricPointRow


@dataclass(frozen=True)
class MetricWrite:
    """One point to store; ``value`` None stands for a non-finite number (NaN, inf)."""

    step: int
    name: str
    value: float | None
    wall_time: float


def _upsert(dialect: str) -> Insert:
    # A point reported twice at one step (a re-run after a crash) replaces the first, so a run's
    # series never holds duplicates.
    if dialect == "postgresql":
        pg = postgresql.insert(MetricPointRow)
        return pg.on_conflict_do_update(
            constraint="uq_metric_points_key",
            set_={"value": pg.excluded.value, "wall_time": pg.excluded.wall_time},
        )
    if dialect == "sqlite":
        lite = sqlite.insert(MetricPointRow)
        return lite.on_conflict_do_update(
            index_elements=["experiment_id", "name", "step"],
            set_={"value": lite.excluded.value, "wall_time": lite.excluded.wall_time},
        )
    raise RuntimeError(f"metric upserts are not written for the {dialect} dialect")


class MetricRepository:
    """SQL over ``metric_points``."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def write(self, experiment_id: str, points: Sequence[MetricWrite]) -> None:
        """Store a batch in one statement (the last of duplicates within the batch wins)."""
        unique = {(p.name, p.step): p for p in points}
        if not unique:
            return
        rows = [
            {
                "experiment_id": experiment_id,
                "step": p.step,
                "name": p.name,
                "value": p.value,
                "wall_time": p.wall_time,
            }
            for p in unique.values()
        ]
        tiers = TierRepository(self.session)
        ends = tiers.ends(experiment_id, sorted({p.name for p in unique.values()}))
        self.session.execute(_upsert(self.session.get_bind().dialect.name), rows)
        by_name: dict[str, list[Point]] = defaultdict(list)
        for p in sorted(unique.values(), key=lambda p: p.step):
            by_name[p.name].append(Point(p.step, p.value, p.wall_time))
        tiers.stored(experiment_id, by_name, ends)

    def page(
        self, experiment_id: str, names: Sequence[str], after_step: int | None, limit: int
    ) -> tuple[list[MetricPointRow], int | None]:
        """Points ordered by (step, name) after ``after_step``, never splitting a step across pages.

        Returns the points and the ``after_step`` of the next page (None on the last page).
        """
        query = select(MetricPointRow).where(MetricPointRow.experiment_id == experiment_id)
        if names:
            query = query.where(MetricPointRow.name.in_(names))
        if after_step is not None:
            query = query.where(MetricPointRow.step > after_step)
        ordered = query.order_by(MetricPointRow.step, MetricPointRow.name)
        rows = list(self.session.scalars(ordered.limit(limit + 1)))
        if len(rows) <= limit:
            return rows, None
        cut_step = rows[limit].step
        whole = [r for r in rows if r.step < cut_step]
        if not whole:
            # One step holds more points than ``limit``: return that step whole.
            whole = list(self.session.scalars(ordered.where(MetricPointRow.step == cut_step)))
        return whole, whole[-1].step

    def delete_after(self, experiment_id: str, step: int) -> None:
        """Forget every point after ``step`` (a resumed run recomputes them)."""
        names = SeriesRepository(self.session).names(experiment_id)
        self.session.execute(
            delete(MetricPointRow).where(
                MetricPointRow.experiment_id == experiment_id, MetricPointRow.step > step
            )
        )
        TierRepository(self.session).refresh(experiment_id, names, step + 1, None)
