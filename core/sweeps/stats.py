"""Aggregate statistics over a configuration's seeds, the way rliable reports them.

Agarwal et al. (NeurIPS 2021, "Deep Reinforcement Learning at the Edge of the Statistical
Precipice") recommend, for a handful of runs: the **interquartile mean** (the mean of the middle
half of the scores: robust to one collapsed seed, less noisy than the median), **percentile
bootstrap confidence intervals** over runs, and the **probability of improvement**
P(X > Y) of one configuration over another. Their library, rliable, needs NumPy 2 (our MindSpore
pins NumPy < 2), so these are written here in NumPy, with rliable's definitions:

- ``iqm`` is ``scipy.stats.trim_mean(x, 0.25)``: ``floor(n / 4)`` scores cut from each end, so
  with fewer than 4 runs it is the mean. Tested against SciPy and hand-computed cases.
- ``bootstrap_ci`` resamples the runs with replacement and takes the 2.5th and 97.5th percentiles
  of the statistic (rliable's default ``percentile`` method). A sweep's configuration is one task
  (its environment is part of the configuration), so rliable's *stratified* bootstrap, which
  resamples within each task, is exactly this resampling of its runs.
- ``probability_of_improvement`` is the Mann-Whitney U statistic over all pairs divided by their
  number: P(X > Y) + P(X = Y) / 2; its interval resamples both sides independently.

Every function is deterministic for a given ``seed``: the same runs give the same summary.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]
REPS = 2000
"""Bootstrap resamples for a summary (rliable's own default, 50,000, is for papers)."""
ALPHA = 0.05


@dataclass(frozen=True)
class Interval:
    """A 95% confidence interval."""

    low: float
    high: float


def iqm(scores: Sequence[float] | Array, axis: int = -1) -> Array:
    """The interquartile mean along ``axis``: the mean after cutting ``floor(n / 4)`` of the
    sorted scores from each end (``scipy.stats.trim_mean(scores, 0.25)``)."""
    values = np.sort(np.asarray(scores, dtype=np.float64), axis=axis)
    n = values.shape[axis]
    cut = int(0.25 * n)
    middle = np.take(values, np.arange(cut, n - cut), axis=axis)
    return np.asarray(middle.mean(axis=axis))


def mean(scores: Sequence[float] | Array, axis: int = -1) -> Array:
    """The plain mean along ``axis`` (the same signature as ``iqm``)."""
    return np.asarray(np.asarray(scores, dtype=np.float64).mean(axis=axis))


def bootstrap_ci(
    scores: Sequence[float] | Array,
    statistic: Callable[..., Array] = iqm,
    reps: int = REPS,
    seed: int = 0,
) -> Interval:
    """The percentile bootstrap 95% interval of ``statistic`` over resampled runs."""
    values = np.asarray(scores, dtype=np.float64)
    if values.size == 0:
        raise ValueError("no scores")
    rng = np.random.default_rng(seed)
    samples = values[rng.integers(0, values.size, size=(reps, values.size))]
    estimates = statistic(samples, axis=1)
    low, high = np.percentile(estimates, [100 * ALPHA / 2, 100 * (1 - ALPHA / 2)])
    return Interval(float(low), float(high))


def probability_of_improvement(x: Sequence[float] | Array, y: Sequence[float] | Array) -> float:
    """P(X > Y) + P(X = Y) / 2 over every pair of a run of ``x`` and a run of ``y``."""
    a = np.asarray(x, dtype=np.float64)[:, None]
    b = np.asarray(y, dtype=np.float64)[None, :]
    return float(((a > b) + 0.5 * (a == b)).mean())


def probability_of_improvement_ci(
    x: Sequence[float] | Array, y: Sequence[float] | Array, reps: int = REPS, seed: int = 0
) -> Interval:
    """The percentile bootstrap 95% interval of ``probability_of_improvement``, resampling the
    runs of ``x`` and of ``y`` independently."""
    a = np.asarray(x, dtype=np.float64)
    b = np.asarray(y, dtype=np.float64)
    rng = np.random.default_rng(seed)
    xs = a[rng.integers(0, a.size, size=(reps, a.size))][:, :, None]
    ys = b[rng.integers(0, b.size, size=(reps, b.size))][:, None, :]
    estimates = ((xs > ys) + 0.5 * (xs == ys)).mean(axis=(1, 2))
    low, high = np.percentile(estimates, [100 * ALPHA / 2, 100 * (1 - ALPHA / 2)])
    return Interval(float(low), float(high))


@dataclass(frozen=True)
class CurvePoint:
    """The runs' mean at one step of the common grid, its interval and how many runs it has."""

    step: int
    mean: float
    low: float
    high: float
    runs: int


def step_value(steps: Sequence[int], values: Sequence[float], at: int) -> float | None:
    """A series' value at ``at``: its last point at or before it (None before its first)."""
    index = int(np.searchsorted(np.asarray(steps), at, side="right")) - 1
    return None if index < 0 else float(values[index])


def aggregate_curve(
    series: Sequence[tuple[Sequence[int], Sequence[float]]],
    grid: Sequence[int],
    reps: int = 500,
    seed: int = 0,
) -> list[CurvePoint]:
    """The mean over runs, with its bootstrap 95% interval, at each step of ``grid``; a run counts
    at a step from its first point on, holding its last value (an evaluation stands until the
    next). Steps where no run has a value yet are left out."""
    points = []
    for step in grid:
        at = [step_value(s, v, step) for s, v in series]
        present = [v for v in at if v is not None]
        if not present:
            continue
        ci = bootstrap_ci(present, mean, reps=reps, seed=seed)
        points.append(CurvePoint(step, float(np.mean(present)), ci.low, ci.high, len(present)))
    return points


def common_grid(all_steps: Sequence[Sequence[int]], max_points: int = 100) -> list[int]:
    """The steps of every run's series together, thinned evenly to at most ``max_points``."""
    steps = sorted({int(s) for run in all_steps for s in run})
    if len(steps) <= max_points:
        return steps
    picks = np.linspace(0, len(steps) - 1, max_points).round().astype(int)
    return [steps[i] for i in sorted(set(picks.tolist()))]
