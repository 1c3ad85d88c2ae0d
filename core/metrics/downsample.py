"""Shrinking a metric series for a chart without hiding its spikes.

Taking every k-th point of a noisy learning curve drops exactly the points a researcher looks for: a
return that collapsed for a few hundred steps, a loss that blew up once. A series longer than
``max_points`` keeps its first and last point, and splits its steps into buckets of one width
aligned on multiples of it (``Grid``: bucket ``step // width``), at most ``(max_points - 2) // 2``
of them. From each bucket it keeps the point with the lowest and the one with the highest value
(the earlier point of equal values), in step order, so the drawn line covers the same vertical
range as the full data at every horizontal position. A bucket with no points keeps nothing; one
whose values are all non-finite (stored as None) keeps its first point, so the chart can show the
gap.

Buckets are step ranges on a fixed grid rather than runs of consecutive points because then a
bucket is a union of whole buckets of the summaries the database keeps as points arrive
(``core.metrics.tiers``: tier ``t`` summarises aligned ranges of ``FANOUT ** t`` steps). The grid's
width is a whole number of a tier's widths, at least ``MIN_MULTIPLE`` of them, so a chart reads at
most about ``FANOUT * MIN_MULTIPLE`` summaries per bucket however long the run; a chart whose
buckets are narrower than twice the finest tier is shrunk from the points themselves. The width
is the smallest such multiple that gives at most the bucket count, less than ``1 + 1 /
MIN_MULTIPLE`` times the narrowest width that does, so a chart holds about two thirds to all of
the buckets ``max_points`` allows. ``min_max`` here is the
rule in plain Python, the oracle the SQL is tested against.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MIN_POINTS = 4
"""The smallest ``max_points``: the first and last point and one bucket's two extremes."""
FANOUT = 4
"""Each tier's buckets are this many of the tier below's."""
BASE_TIER = 3
"""The finest tier the database keeps: ranges of ``FANOUT ** 3`` = 64 steps."""
TOP_TIER = 14
"""The coarsest tier: ranges of ``FANOUT ** 14`` (about 268 million) steps."""
MIN_MULTIPLE = 2
"""A chart's bucket is at least this many buckets of the tier it is read from."""


@dataclass(frozen=True)
class Point:
    """One point of a series."""

    step: int
    value: float | None
    wall_time: float


def tier_width(tier: int) -> int:
    """The steps one bucket of ``tier`` covers."""
    return int(FANOUT**tier)


@dataclass(frozen=True)
class Grid:
    """The buckets of one chart: bucket ``step // width`` (steps are never negative).

    ``tier`` is the coarsest tier whose buckets tile this grid (``width`` is a multiple of its
    width, at least ``MIN_MULTIPLE`` times it), or 0 when the chart is read from the points.
    """

    width: int
    tier: int

    @classmethod
    def of(cls, first: int, last: int, max_points: int) -> Grid:
        """The grid of a series from step ``first`` to step ``last`` shrunk to ``max_points``."""
        if max_points < MIN_POINTS:
            raise ValueError(f"max_points must be at least {MIN_POINTS}")
        buckets = (max_points - 2) // 2
        # Buckets ``first // w`` to ``last // w`` number at most (last - first) // w + 2: a width
        # above (last - first) / (buckets - 1) gives at most ``buckets``. One bucket must hold
        # every step from 0.
        least = (last - first) // (buckets - 1) + 1 if buckets > 1 else last + 1
        tier = next(
            (
                t
                for t in range(TOP_TIER, BASE_TIER - 1, -1)
                if MIN_MULTIPLE * tier_width(t) <= least
            ),
            0,
        )
        unit = tier_width(tier) if tier else 1
        return cls(width=-(-least // unit) * unit, tier=tier)

    def index(self, step: int) -> int:
        """The bucket of ``step``."""
        return step // self.width


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
    the last, and each bucket's extremes, in step order. Short series come back unchanged."""
    if max_points < MIN_POINTS:
        raise ValueError(f"max_points must be at least {MIN_POINTS}")
    if len(points) <= max_points:
        return list(points)
    first, last = points[0], points[-1]
    grid = Grid.of(first.step, last.step, max_points)
    kept = {first.step: first, last.step: last}
    for _, bucket in itertools.groupby(points, key=lambda p: grid.index(p.step)):
        kept.update((p.step, p) for p in extremes(bucket))
    return [kept[s] for s in sorted(kept)]
