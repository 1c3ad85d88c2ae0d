"""Shrinking a metric series for a chart without hiding its spikes.

Taking every k-th point of a noisy learning curve drops exactly the points a researcher looks for: a
return that collapsed for a few hundred steps, a loss that blew up once. ``min_max`` splits the
series into buckets of consecutive points and keeps, from each, the lowest and the highest point (in
step order), plus the first and last point of the whole series, so the drawn line covers the same
vertical range as the full data at every horizontal position.

Non-finite values are stored as None; a bucket of only None keeps one of them, so the chart can
show the gap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Point:
    """One point of a series."""

    step: int
    value: float | None
    wall_time: float


def _extremes(bucket: Sequence[Point]) -> list[Point]:
    finite = [p for p in bucket if p.value is not None]
    if not finite:
        return [bucket[0]]
    low = min(finite, key=lambda p: p.value)  # type: ignore[arg-type,return-value]
    high = max(finite, key=lambda p: p.value)  # type: ignore[arg-type,return-value]
    if low is high:
        return [low]
    return [low, high] if low.step <= high.step else [high, low]


def min_max(points: Sequence[Point], max_points: int) -> list[Point]:
    """At most ``max_points`` points of ``points`` (ordered by step) that keep each bucket's
    extremes and the series' first and last point. Short series come back unchanged."""
    if max_points < 4:
        raise ValueError("max_points must be at least 4")
    if len(points) <= max_points:
        return list(points)
    first, last, inner = points[0], points[-1], points[1:-1]
    buckets = (max_points - 2) // 2
    kept: list[Point] = [first]
    for b in range(buckets):
        # Bucket b holds inner[start:end]; the sizes differ by at most one point.
        start = b * len(inner) // buckets
        end = (b + 1) * len(inner) // buckets
        if end > start:
            kept.extend(_extremes(inner[start:end]))
    kept.append(last)
    return kept
