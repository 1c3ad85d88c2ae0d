"""Early stopping for sweeps: asynchronous successive halving (ASHA, Li et al. 2020).

A sweep with ``early_stopping`` (or, the same thing spelled as its search, ``search`` with
``method: asha`` over the grid and the random draws) names **rungs** (step counts below its
runs' budget) and a **reduction factor** η. Each time one of its runs reports its evaluation
return at a rung step, the run's configuration is scored there: the interquartile mean
(``core.sweeps.stats.iqm``) of the returns its seeds reported at that rung so far. The
configuration stays in the race if its score is among the best ``max(1, n // η)`` of the ``n``
configurations scored at that rung so far (itself included); otherwise the run stops there, with
its checkpoint at the rung kept, and ends ``succeeded`` short of its budget with the reason
(``Rung.reason``; the sweep's summary gives such a run no final value). A run of the first
configuration at a rung always goes on (there is nothing to compare with); later ones must beat a
larger field, so each rung keeps about one configuration in η, asynchronously: no run waits for
another to reach the rung (the stopping form of ASHA, as Ray Tune's ASHA scheduler has it).

Decisions are made in the run's own process, at the rung step, from the metric points the
database holds (``workers.runs.early_stop``); a run resumed from a checkpoint before a rung
decides again there. Nothing here writes.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from core.models import Experiment, MetricPointRow
from core.sweeps import stats
from learners.api import ExperimentSpec, FieldError

METRIC = "eval/episode_return"
MAX_RUNGS = 20


class EarlyStopping(BaseModel):
    """A sweep's ``early_stopping``, or its ``search`` with ``method: asha``: asynchronous
    successive halving (``core.sweeps.asha``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    method: Literal["asha"] = "asha"
    """The method; ``asha`` (asynchronous successive halving) is the one there is."""
    rungs: list[int] = Field(min_length=1, max_length=MAX_RUNGS)
    """The steps at which runs are compared, increasing, each below every run's ``total_steps``
    and a multiple of its ``evaluation.every_steps`` (so every run evaluates there)."""
    reduction_factor: int = Field(default=3, ge=2, le=16)
    """η: each rung keeps the best ``max(1, n // η)`` of the ``n`` configurations scored there."""
    metric: Literal["eval/episode_return"] = "eval/episode_return"
    """What configurations are compared by, higher is better: the greedy evaluation return."""


def stopping_of(sweep_spec: Mapping[str, object]) -> dict[str, object] | None:
    """A stored sweep spec's early stopping: its ``early_stopping``, or its ``search`` when that
    is ``method: asha``; None when its runs train their whole budget."""
    early = sweep_spec.get("early_stopping")
    if isinstance(early, dict):
        return early
    search = sweep_spec.get("search")
    if isinstance(search, dict) and search.get("method") == "asha":
        return search
    return None


def spelling_errors(search: object, early_stopping: EarlyStopping | None) -> list[FieldError]:
    """A sweep that gives its rungs both as its ``search`` and as ``early_stopping``."""
    if not isinstance(search, EarlyStopping) or early_stopping is None:
        return []
    reason = (
        "give the rungs once: a search with method asha is this early stopping, over the grid "
        "and the random draws"
    )
    return [FieldError("early_stopping", reason)]


def rung_errors(
    early: EarlyStopping, spec: ExperimentSpec, field: str = "early_stopping"
) -> list[FieldError]:
    """Why ``early``'s rungs do not fit one run's ``spec`` (none: they do), named under
    ``field`` (``early_stopping``, or ``search`` where the sweep spells it so)."""
    errors = []
    rungs = early.rungs
    if any(b <= a for a, b in zip(rungs, rungs[1:], strict=False)) or rungs[0] <= 0:
        errors.append(FieldError(f"{field}.rungs", "must be positive and increasing"))
    if rungs[-1] >= spec.total_steps:
        errors.append(
            FieldError(
                f"{field}.rungs",
                f"the last rung ({rungs[-1]:,}) must be below the runs' total_steps "
                f"({spec.total_steps:,}): a rung at the end stops nothing",
            )
        )
    every = spec.evaluation.every_steps
    off_grid = [r for r in rungs if r % every]
    if off_grid:
        errors.append(
            FieldError(
                f"{field}.rungs",
                f"{', '.join(f'{r:,}' for r in off_grid)} not a multiple of the runs' "
                f"evaluation.every_steps ({every:,}): a run must evaluate at each rung",
            )
        )
    return errors


@dataclass(frozen=True)
class Rung:
    """What a rung decided for one run."""

    step: int
    index: int
    """The rung's place, from 1."""
    of: int
    """How many rungs the sweep has."""
    config: str
    score: float
    seeds: int
    """How many of the configuration's seeds the score is the IQM of."""
    place: int
    """The configuration's place among those scored at the rung (1: best)."""
    scored: int
    """How many configurations were scored at the rung (this one included)."""
    keep: int
    """How many of them stay in the race."""

    @property
    def stops(self) -> bool:
        return self.place > self.keep

    def describe(self) -> str:
        """What the rung found, for the run's log."""
        seeds = f"{self.seeds} seed{'s' if self.seeds != 1 else ''}"
        verdict = "stops" if self.stops else "goes on"
        return (
            f"rung {self.index} of {self.of} at step {self.step:,}: configuration {self.config} "
            f"scores {self.score:.4g} (IQM of {seeds}' {METRIC}), place {self.place} of the "
            f"{self.scored} configuration{'s' if self.scored != 1 else ''} scored there; the "
            f"best {self.keep} go on: it {verdict}"
        )

    def reason(self) -> str:
        """Why the run stopped, for its status reason."""
        return f"stopped early by the sweep's successive halving: {self.describe()}"


def decide(
    early: EarlyStopping,
    step: int,
    config: str,
    scores: Mapping[str, Sequence[float | None]],
) -> Rung | None:
    """The rung at ``step`` for a run of ``config``, from each configuration's seeds' values at
    that rung (``scores``, this run's included; None for a non-finite value, which ranks last);
    None when ``step`` is no rung."""
    if step not in early.rungs:
        return None
    iqms = {c: _score(values) for c, values in scores.items() if values}
    if config not in iqms:
        raise ValueError(f"configuration {config} has no value at step {step}")
    mine = iqms[config]
    # Ties go to the configuration being decided: it stops only when strictly behind.
    place = 1 + sum(score > mine for c, score in iqms.items() if c != config)
    keep = max(1, len(iqms) // early.reduction_factor)
    return Rung(
        step=step,
        index=early.rungs.index(step) + 1,
        of=len(early.rungs),
        config=config,
        score=mine,
        seeds=len(scores[config]),
        place=place,
        scored=len(iqms),
        keep=keep,
    )


def _score(values: Sequence[float | None]) -> float:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if len(finite) < len(values):
        return -math.inf
    return float(stats.iqm(finite))


def rung_values(
    session: Session, sweep_id: str, step: int, exclude: str | None = None, metric: str = METRIC
) -> dict[str, list[float | None]]:
    """Each configuration's runs' values of ``metric`` at ``step``, as the database has them
    (leaving out the run ``exclude``)."""
    query = (
        select(Experiment.sweep_config, MetricPointRow.value)
        .join(MetricPointRow, MetricPointRow.experiment_id == Experiment.id)
        .where(
            Experiment.sweep_id == sweep_id,
            MetricPointRow.name == metric,
            MetricPointRow.step == step,
        )
    )
    if exclude is not None:
        query = query.where(Experiment.id != exclude)
    rows = session.execute(query).all()
    values: defaultdict[str, list[float | None]] = defaultdict(list)
    for config, value in rows:
        if config is not None:
            values[config].append(None if value is None else float(value))
    return dict(values)
