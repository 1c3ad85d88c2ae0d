"""Model-based search for sweeps: the tree-structured Parzen estimator (TPE; Bergstra et al. 2011,
"Algorithms for Hyper-Parameter Optimization"), through Optuna's ``TPESampler``.

A sweep with ``search: {"method": "tpe", "trials": N}`` does not draw its configurations up front.
Its ``space.random`` is the space the sampler searches (``choice`` as a categorical, ``uniform``,
``log_uniform``, ``int_uniform`` as ranges); each **trial** is one configuration, trained once per
seed as any sweep's configuration is. A configuration is proposed when the sweep has room for its
runs under ``max_concurrent`` (``core.sweeps.scheduler``), from everything the database holds at
that moment: each earlier configuration whose runs all ended is a finished trial scored by the
interquartile mean of its runs' final evaluation returns (the sweep summary's final values), one
whose runs all failed is a failed trial, one whose runs a rung of ``early_stopping`` stopped is a
pruned trial (scored at the highest rung they reached: Optuna ranks it below every finished trial),
and one still training is a running trial, which the sampler's constant liar counts as a poor
result so that concurrent proposals spread out. The first
``startup_trials`` are drawn at random. Nothing lives in memory between proposals: an API restart,
or another API process, proposes the same next configuration from the same rows, and the
sampler is seeded by ``space.seed`` and the trial's number, so a sweep replays exactly.

Every configuration the search can reach is checked at submission (``reachable``): the corners of
the space (each range's ends, every choice), crossed, as the memory and bound checks grow with the
values they check. Nothing here writes.
"""

from __future__ import annotations

import itertools
import json
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from core.sweeps import stats
from learners.api import FieldError

MAX_CROSSED_CORNERS = 256
"""Up to this many corners are crossed in full; past it each path's ends are checked with the
other paths at their lowest, then at their highest."""


class ModelSearch(BaseModel):
    """A sweep's ``search``: configurations proposed one by one by a model of the results so far."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    method: Literal["tpe"] = "tpe"
    """The searcher: ``tpe``, the tree-structured Parzen estimator (Optuna's ``TPESampler``)."""
    trials: int = Field(ge=1, le=1000)
    """How many configurations to try in all (each trained once per seed)."""
    startup_trials: int = Field(default=5, ge=1, le=1000)
    """The first trials are drawn at random, before the model has results to learn from."""
    metric: Literal["eval/episode_return"] = "eval/episode_return"
    """What a configuration is scored by, higher is better: the IQM over its seeds of each run's
    final greedy evaluation return."""


class TrialState(StrEnum):
    """Where a proposed configuration stands."""

    COMPLETE = "complete"
    RUNNING = "running"
    FAILED = "failed"
    PRUNED = "pruned"
    """Every run a rung of ``early_stopping`` stopped: scored at the highest rung reached."""


@dataclass(frozen=True)
class Trial:
    """A proposed configuration and its result so far."""

    params: dict[str, Any]
    state: TrialState
    value: float | None = None
    step: int | None = None
    """A pruned trial's rung: the step its ``value`` was taken at."""


def search_errors(
    space_random: dict[str, dict[str, Any]],
    grid: dict[str, Any],
    num_samples_set: bool,
) -> list[FieldError]:
    """Why a sweep's other fields do not go with a model-based search (none: they do)."""
    errors = []
    if grid:
        errors.append(
            FieldError("space.grid", 'a tpe search samples space.random: give {"choice": [...]}')
        )
    if not space_random:
        errors.append(FieldError("space.random", "a tpe search needs at least one distribution"))
    if num_samples_set:
        errors.append(
            FieldError("space.num_samples", "a tpe search draws search.trials configurations")
        )
    return errors


def reachable(space_random: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The configurations that stand for every one the search can propose: each range's ends
    and every choice, crossed (``MAX_CROSSED_CORNERS`` at most; see its docstring)."""
    paths = list(space_random)
    ends = [_ends(space_random[p]) for p in paths]
    if math.prod(len(e) for e in ends) <= MAX_CROSSED_CORNERS:
        return [dict(zip(paths, combo, strict=True)) for combo in itertools.product(*ends)]
    points = []
    for base in (0, -1):
        for i, path in enumerate(paths):
            for value in ends[i]:
                point = {p: ends[j][base] for j, p in enumerate(paths)}
                point[path] = value
                points.append(point)
    unique = {json.dumps(p, sort_keys=True): p for p in points}
    return list(unique.values())


def _ends(distribution: dict[str, Any]) -> list[Any]:
    kind, args = next(iter(distribution.items()))
    if kind == "choice":
        return list(args)
    return [args[0], args[1]]


def score(final_values: Sequence[float]) -> float:
    """A finished configuration's value: the IQM of its runs' final values."""
    return float(stats.iqm(list(final_values)))


def propose(
    space_random: dict[str, dict[str, Any]],
    search: ModelSearch,
    seed: int,
    trials: Sequence[Trial],
) -> dict[str, Any]:
    """The next configuration to try, given the trials so far (in the order proposed)."""
    import optuna
    from optuna.distributions import (
        BaseDistribution,
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )
    from optuna.trial import TrialState as OptunaState
    from optuna.trial import create_trial

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    distributions: dict[str, BaseDistribution] = {}
    for path, distribution in space_random.items():
        kind, args = next(iter(distribution.items()))
        if kind == "choice":
            # By index: a choice may be any JSON value, a categorical only a scalar.
            distributions[path] = CategoricalDistribution(list(range(len(args))))
        elif kind == "int_uniform":
            distributions[path] = IntDistribution(int(args[0]), int(args[1]))
        else:
            low, high = float(args[0]), float(args[1])
            distributions[path] = FloatDistribution(low, high, log=kind == "log_uniform")
    with warnings.catch_warnings():
        # multivariate and constant_liar are marked experimental by Optuna.
        warnings.simplefilter("ignore")
        sampler = optuna.samplers.TPESampler(
            seed=(seed + len(trials)) % 2**31,
            n_startup_trials=search.startup_trials,
            constant_liar=True,
            multivariate=True,
        )
        study = optuna.create_study(direction="maximize", sampler=sampler)
        states = {
            TrialState.COMPLETE: OptunaState.COMPLETE,
            TrialState.RUNNING: OptunaState.RUNNING,
            TrialState.FAILED: OptunaState.FAIL,
            TrialState.PRUNED: OptunaState.PRUNED,
        }
        for trial in trials:
            params = {p: _encoded(space_random[p], trial.params[p]) for p in distributions}
            if any(v is None for v in params.values()):
                continue  # a value no longer in the space (cannot happen for a stored sweep)
            pruned: dict[int, float] | None = None
            if trial.state == TrialState.PRUNED and trial.value is not None:
                pruned = {trial.step or 0: trial.value}
            study.add_trial(
                create_trial(
                    params=params,
                    distributions=distributions,
                    value=trial.value if trial.state == TrialState.COMPLETE else None,
                    state=states[trial.state],
                    # Optuna ranks a pruned trial by its last intermediate value, below those
                    # that completed and above those that failed.
                    intermediate_values=pruned,
                )
            )
        asked = study.ask(distributions)
    return {p: _decoded(space_random[p], asked.params[p]) for p in distributions}


def _encoded(distribution: dict[str, Any], value: Any) -> Any:
    kind, args = next(iter(distribution.items()))
    if kind != "choice":
        return value
    for index, option in enumerate(args):
        if json.dumps(option, sort_keys=True) == json.dumps(value, sort_keys=True):
            return index
    return None


def _decoded(distribution: dict[str, Any], value: Any) -> Any:
    kind, args = next(iter(distribution.items()))
    if kind == "choice":
        return args[int(value)]
    if kind == "int_uniform":
        return int(value)
    # Six significant digits read (and print) cleanly; kept within the range.
    return min(max(float(f"{float(value):.6g}"), float(args[0])), float(args[1]))
