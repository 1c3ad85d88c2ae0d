"""Sweeps: insert, read within a project, list with a cursor, lock one while its runs are started,
count its runs by status, and read one metric of all its runs at once."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core.enums import ExperimentStatus
from core.models import Experiment, MetricPointRow, Sweep


@dataclass
class RunCounts:
    """A sweep's runs by status, and their steps together (its progress)."""

    by_status: dict[ExperimentStatus, int] = field(default_factory=dict)
    step: int = 0
    total_steps: int = 0

    @property
    def total(self) -> int:
        return sum(self.by_status.values())

    def count(self, *statuses: ExperimentStatus) -> int:
        return sum(self.by_status.get(s, 0) for s in statuses)


class SweepRepository:
    """SQL over ``sweeps`` and the experiments that belong to them."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, sweep: Sweep) -> None:
        """Stage a new sweep for insertion."""
        self.session.add(sweep)
        self.session.flush()

    def get(self, sweep_id: str, project_id: str | None = None) -> Sweep | None:
        """The sweep; None when there is none (or it is another project's than ``project_id``)."""
        sweep = self.session.get(Sweep, sweep_id, populate_existing=True)
        if sweep is None or (project_id is not None and sweep.project_id != project_id):
            return None
        return sweep

    def lock(self, sweep_id: str) -> Sweep | None:
        """The sweep, its row locked until the transaction ends (on PostgreSQL; SQLite serialises
        writes anyway), so two API processes never start its runs past ``max_concurrent``."""
        query = select(Sweep).where(Sweep.id == sweep_id).with_for_update()
        return self.session.scalars(query.execution_options(populate_existing=True)).first()

    def page(self, project_id: str, limit: int, after: str | None) -> list[Sweep]:
        """Up to ``limit`` sweeps of the project, newest first, older than ``after``."""
        query = (
            select(Sweep)
            .where(Sweep.project_id == project_id)
            .order_by(Sweep.id.desc())
            .limit(limit)
        )
        if after is not None:
            query = query.where(Sweep.id < after)
        return list(self.session.scalars(query))

    def counts(self, sweep_ids: Sequence[str]) -> dict[str, RunCounts]:
        """Each sweep's runs by status and their steps together."""
        found: dict[str, RunCounts] = {sweep_id: RunCounts() for sweep_id in sweep_ids}
        if not sweep_ids:
            return found
        query = (
            select(
                Experiment.sweep_id,
                Experiment.status,
                func.count(),
                func.coalesce(func.sum(Experiment.step), 0),
                func.coalesce(func.sum(Experiment.total_steps), 0),
            )
            .where(Experiment.sweep_id.in_(sweep_ids))
            .group_by(Experiment.sweep_id, Experiment.status)
        )
        for sweep_id, status, count, step, total in self.session.execute(query):
            counts = found[str(sweep_id)]
            counts.by_status[ExperimentStatus(status)] = int(count)
            counts.step += int(step)
            counts.total_steps += int(total)
        return found

    def runs(self, sweep_id: str) -> list[Experiment]:
        """The sweep's runs in the order they start (seed-major, as created)."""
        query = select(Experiment).where(Experiment.sweep_id == sweep_id).order_by(Experiment.id)
        return list(self.session.scalars(query))

    def run_ids(self, sweep_id: str, statuses: Sequence[ExperimentStatus]) -> list[str]:
        """Ids of the sweep's runs in one of ``statuses``, in start order."""
        query = (
            select(Experiment.id)
            .where(Experiment.sweep_id == sweep_id, Experiment.status.in_(statuses))
            .order_by(Experiment.id)
        )
        return list(self.session.scalars(query))

    def with_pending(self) -> list[str]:
        """Ids of every sweep that has a run waiting (``pending``) or configurations left to
        propose (``proposing``), oldest first."""
        query = (
            select(Experiment.sweep_id)
            .where(Experiment.status == ExperimentStatus.PENDING, Experiment.sweep_id.is_not(None))
            .distinct()
        )
        waiting = {str(s) for s in self.session.scalars(query)}
        waiting |= set(self.session.scalars(select(Sweep.id).where(Sweep.proposing.is_(True))))
        return sorted(waiting)

    def created_since(self, project_id: str, since: dt.datetime) -> list[dt.datetime]:
        """When each of the project's sweeps created after ``since`` was (the submission rate
        counts a sweep as one submission)."""
        query = select(Sweep.created_at).where(
            Sweep.project_id == project_id, Sweep.created_at > since
        )
        return list(self.session.scalars(query))

    def series(
        self, experiment_ids: Sequence[str], name: str
    ) -> dict[str, list[tuple[int, float]]]:
        """Metric ``name`` of each run, ``(step, value)`` by step, finite values only."""
        found: dict[str, list[tuple[int, float]]] = defaultdict(list)
        if not experiment_ids:
            return found
        query = (
            select(MetricPointRow.experiment_id, MetricPointRow.step, MetricPointRow.value)
            .where(
                MetricPointRow.experiment_id.in_(experiment_ids),
                MetricPointRow.name == name,
                MetricPointRow.value.is_not(None),
            )
            .order_by(MetricPointRow.experiment_id, MetricPointRow.step)
        )
        for experiment_id, step, value in self.session.execute(query):
            if value is not None:
                found[str(experiment_id)].append((int(step), float(value)))
        return found
