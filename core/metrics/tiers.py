"""Summaries of a metric series kept as its points arrive, so a chart of a long run reads a few
hundred rows instead of its points.

Tier ``t`` (``BASE_TIER`` to ``TOP_TIER`` of ``core.metrics.downsample``) splits a series' steps
into aligned ranges of ``FANOUT ** t`` steps; a ``Summary`` of one range holds what the chart rule
needs of it: how many points, its first point's step and wall time, its last step, and its lowest
and highest finite point (the earlier of equal values). Summaries merge exactly: the summary of a
range is the merge of the summaries of the ranges it is made of, so tier ``t + 1`` is computed from
tier ``t``, and a chart bucket, a whole number of a tier's ranges, from that tier
(``core.metrics.tier_repository``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from core.metrics.downsample import Point

Extreme = tuple[float, int, float]
"""(value, step, wall time) of a finite point."""


@dataclass(frozen=True)
class Summary:
    """One range (``bucket``) of a series at one tier."""

    bucket: int
    points: int
    first: tuple[int, float]
    """(step, wall time) of the first point."""
    last_step: int
    low: Extreme | None
    """The lowest finite point; None when no value in the range is finite."""
    high: Extreme | None
    """The highest finite point."""

    @classmethod
    def of_point(cls, bucket: int, point: Point) -> Summary:
        """The summary of one point."""
        extreme = None if point.value is None else (point.value, point.step, point.wall_time)
        return cls(bucket, 1, (point.step, point.wall_time), point.step, extreme, extreme)

    def picks(self) -> list[Point]:
        """What a chart bucket with this summary keeps (``core.metrics.downsample.extremes``): its
        lowest and highest finite point in step order, or its first point when none is finite."""
        if self.low is None or self.high is None:
            return [Point(self.first[0], None, self.first[1])]
        kept = {s: Point(s, v, w) for v, s, w in (self.low, self.high)}
        return [kept[s] for s in sorted(kept)]


def merge(bucket: int, parts: Iterable[Summary]) -> Summary:
    """The summary of the union of ``parts`` (at least one), as bucket ``bucket``."""
    parts = list(parts)
    lows = [p.low for p in parts if p.low is not None]
    highs = [p.high for p in parts if p.high is not None]
    return Summary(
        bucket=bucket,
        points=sum(p.points for p in parts),
        first=min(p.first for p in parts),
        last_step=max(p.last_step for p in parts),
        low=min(lows, key=lambda e: (e[0], e[1])) if lows else None,  # then the earlier step
        high=min(highs, key=lambda e: (-e[0], e[1])) if highs else None,
    )


def roll_up(parts: Iterable[Summary], divisor: int) -> list[Summary]:
    """Summaries of buckets ``part.bucket // divisor``, by bucket."""
    grouped: dict[int, list[Summary]] = defaultdict(list)
    for part in parts:
        grouped[part.bucket // divisor].append(part)
    return [merge(b, grouped[b]) for b in sorted(grouped)]


def chart(rows: Iterable[Sequence[Any]], divisor: int) -> tuple[list[Point], int]:
    """The picks of buckets ``bucket // divisor`` merged from stored summaries given as rows of
    (bucket, points, first step, first wall time, last step, low value, low step, low wall time,
    high value, high step, high wall time) in bucket order, and how many points they hold.

    ``merge`` over ``Summary`` objects, in one pass over plain rows: a chart reads thousands of
    summaries, and building an object for each would cost more than reading them."""
    kept: list[Point] = []
    total = 0
    current: int | None = None
    first: tuple[int, float] = (0, 0.0)
    low: Extreme | None = None
    high: Extreme | None = None
    for bucket, points, first_step, first_wall, _, lv, ls, lw, hv, hs, hw in rows:
        total += points
        if bucket // divisor != current:
            if current is not None:
                kept += Summary(current, 0, first, 0, low, high).picks()
            current, first = bucket // divisor, (first_step, first_wall)
            low = None if lv is None else (lv, ls, lw)
            high = None if hv is None else (hv, hs, hw)
            continue
        # Rows come in bucket order, so the group's first point is its first row's.
        if lv is not None and (low is None or lv < low[0] or (lv == low[0] and ls < low[1])):
            low = (lv, ls, lw)
        if hv is not None and (high is None or hv > high[0] or (hv == high[0] and hs < high[1])):
            high = (hv, hs, hw)
    if current is not None:
        kept += Summary(current, 0, first, 0, low, high).picks()
    return kept, total
