"""Shrinking a metric series for a chart without hiding its spikes.

Taking every k-th point of a noisy learning curve drops exactly the points a researcher looks for: a
return that collapsed for a few hundred steps, a loss that blew up once. A series longer than
``max_points`` keeps its first and last point, and splits the steps strictly between them into
``(max_points - 2) // 2`` buckets of equal step width (``Buckets``). From each bucket it keeps the
point with the lowest and the one with the highest value (the earlier point of equal values), in
step order, so the drawn line covers the same vertical range as the full data at every horizontal
position. A bucket with no points keeps nothing; one whose values are all non-finite (stored as
None) keeps its first point, so the chart can show the gap.

Buckets are step ranges rather than runs of consecutive points because the database can assign a
point to its bucket from the point alone: ``core.repositories.series`` computes the same picks in
SQL over the (experiment, name, step) index, and reads a 10-million-point run without sending it to
Python. ``min_max`` here is the rule in plain Python, the oracle the SQL is tested against.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MIN_POINTS = 4
"""The smallest ``max_points``: the first and last point and one bucket's two extremes."""


@dataclass(frozen=True)
class Point:
    """One point of a series."""

    step: int
    value: float | None
    wall_time: float


@dataclass(frozen=True)
class Buckets:
    """Equal step ranges that cover the steps strictly between a series' first and last step.

    Bucket ``k`` holds the steps ``first + 1 + k * width`` up to, not including,
    ``first + 1 + (k + 1) * width`` (the last bucket ends before ``last``).
    """

    first: int
    last: int
    width: int
    count: int
    """How many buckets the range needs (at most ``(max_points - 2) // 2``)."""

    @classmethod
    def between(cls, first: int, last: int, max_points: int) -> Buckets:
        """The buckets of a series from step ``first`` to step ``last`` shrunk to ``max_points``."""
        if max_points < MIN_POINTS:
            raise ValueError(f"max_points must be at least {MIN_POINTS}")
        inner = max(last - first - 1, 1)
        wanted = (max_points - 2) // 2
        width = -(-inner // wanted)  # ceiling: ``wanted`` buckets of this width cover the range
        return cls(first=first, last=last, width=width, count=-(-inner // width))

    def index(self, step: int) -> int:
        """The bucket of ``step`` (``first < step < last``)."""
        return (step - self.first - 1) // self.width


def extremes(bucket: Iterable[Point]) -> list[Point]:
    """What one bucket keeps: its lowest and highest finite point in step order, or its first point
    when no value is finite."""
    points = list(bucket)
    finite = [p for p in points if p.value is not None]
    if not finite:
        return points[:1]
    # min/max return the first of equal values: the earlier point, as the SQL picks it.
    low = min(finite, key=lambda p: p.value)  # type: ignore[arg-type,return-value]
    high = max(finite, key=lambda p: p.value)  # type: ignore[arg-type,return-value]
    if low is high:
        return [low]
    return [low, high] if low.step < high.step else [high, low]


def min_max(points: Sequence[Point], max_points: int) -> list[Point]:
    """At most ``max_points`` points of ``points`` (ordered by step, one per step): the first and
    the last, and each bucket's extremes. Short series come back unchanged."""
    if max_points < MIN_POINTS:
        raise ValueError(f"max_points must be at least {MIN_POINTS}")
    if len(points) <= max_points:
        return list(points)
    first, last = points[0], points[-1]
    buckets = Buckets.between(first.step, last.step, max_points)
    kept = [first]
    for _, bucket in itertools.groupby(points[1:-1], key=lambda p: buckets.index(p.step)):
        kept.extend(extremes(bucket))
    kept.append(last)
    return kept
