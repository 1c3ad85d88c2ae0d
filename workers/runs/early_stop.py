"""A sweep run's early stopping in its own process (``core.sweeps.asha``): at each rung step the
run's evaluation return, with its sweep's other runs' returns at that step, decides whether it goes
on; a run that falls behind stops there and ends ``succeeded`` with the rung's reason."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from core.models import Experiment, Sweep
from core.sweeps.asha import METRIC, EarlyStopping, decide, rung_values, stopping_of
from learners.api import MetricPoint
from workers.runs.hooks import DatabaseHooks, StopCause


@dataclass(frozen=True)
class Rungs:
    """The early stopping of one sweep run: its sweep, its configuration and the rule."""

    sweep_id: str
    config: str
    rule: EarlyStopping


def rungs_of(session_factory: sessionmaker[Session], experiment_id: str) -> Rungs | None:
    """The run's early stopping; None for a run of no sweep, or of a sweep without it."""
    with session_factory() as session:
        row = session.execute(
            select(Experiment.sweep_id, Experiment.sweep_config, Sweep.spec)
            .join(Sweep, Sweep.id == Experiment.sweep_id)
            .where(Experiment.id == experiment_id)
        ).first()
    stopping = None if row is None else stopping_of(row[2])
    if row is None or row[1] is None or stopping is None:
        return None
    return Rungs(row[0], row[1], EarlyStopping.model_validate(stopping))


class EarlyStoppingHooks(DatabaseHooks):
    """``DatabaseHooks`` that, when the run reports its evaluation return at a rung, ask the rung
    whether the run goes on; one that stops is told so by ``should_stop`` at once (its checkpoint
    at the rung is the last), and its end reason is the rung's (``stop_reason``)."""

    def __init__(self, *args: Any, rungs: Rungs, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rungs = rungs

    def metrics(self, points: Sequence[MetricPoint]) -> None:
        super().metrics(points)
        for point in points:
            if point.name == METRIC and int(point.step) in self.rungs.rule.rungs:
                self._at_rung(int(point.step), float(point.value))

    def _at_rung(self, step: int, value: float) -> None:
        if self.stop_cause is not None:
            return
        try:
            with self.session_factory() as session:
                others = rung_values(session, self.rungs.sweep_id, step, exclude=self.experiment_id)
        except SQLAlchemyError as exc:
            # The race goes on without this rung for the run: a lost rung costs compute, a
            # wrong stop would cost a result.
            self.log("warning", f"the rung at step {step:,} could not be read ({exc}); goes on")
            return
        mine = value if math.isfinite(value) else None
        others.setdefault(self.rungs.config, []).append(mine)
        rung = decide(self.rungs.rule, step, self.rungs.config, others)
        if rung is None:
            return
        self.log("info", rung.describe())
        if rung.stops:
            self.stop_cause = StopCause.EARLY_STOP
            self.stop_reason = rung.reason()
