"""``core.downsample``: the rule in plain Python (the oracle ``test_series_sql`` holds the SQL to).
Short series unchanged; long ones bounded, their ends and each step bucket's extremes kept."""

from __future__ import annotations

import math

import pytest

from core.downsample import Buckets, Point, min_max


def _series(values: list[float | None], spacing: int = 10) -> list[Point]:
    return [Point(step=spacing * k, value=v, wall_time=float(k)) for k, v in enumerate(values)]


def test_a_short_series_comes_back_unchanged() -> None:
    points = _series([1.0, 2.0, None, 4.0])
    assert min_max(points, 4) == points


@pytest.mark.parametrize("max_points", [4, 5, 100, 501])
def test_a_long_series_keeps_its_extremes_its_ends_and_its_order(max_points: int) -> None:
    values: list[float | None] = [math.sin(k / 50) for k in range(10_000)]
    values[1234], values[7777] = 50.0, -50.0  # one spike, one dip: every-k-th sampling loses them
    points = _series(values)

    kept = min_max(points, max_points)

    assert len(kept) <= max_points
    assert kept[0] == points[0] and kept[-1] == points[-1]
    assert [p.step for p in kept] == sorted({p.step for p in kept})
    assert {50.0, -50.0} <= {p.value for p in kept}
    assert set(kept) <= set(points)


def test_buckets_split_the_steps_between_the_ends_into_equal_ranges() -> None:
    buckets = Buckets.between(first=0, last=1001, max_points=202)
    assert (buckets.width, buckets.count) == (10, 100)
    assert [buckets.index(s) for s in (1, 10, 11, 1000)] == [0, 0, 1, 99]
    # 1000 steps in at most 4 buckets: 4 of width 250; 999 steps in at most 3: 3 of width 333.
    assert Buckets.between(0, 1001, 10) == Buckets(first=0, last=1001, width=250, count=4)
    assert Buckets.between(0, 1000, 8) == Buckets(first=0, last=1000, width=333, count=3)
    with pytest.raises(ValueError):
        Buckets.between(0, 10, 3)


def test_every_bucket_keeps_its_own_high_and_low_in_step_order() -> None:
    # A sawtooth between two end points, one point per step: each bucket (steps 1-10, 11-20, ...)
    # holds one 0 and then one 9.
    points = _series([5.0] + [float(k % 10) for k in range(1000)] + [5.0], spacing=1)
    kept = min_max(points, 202)
    assert kept[0] == points[0] and kept[-1] == points[-1]
    assert [p.step for p in kept[1:-1]] == [
        s for k in range(100) for s in (1 + 10 * k, 10 + 10 * k)
    ]
    assert [p.value for p in kept[1:-1]] == [0.0, 9.0] * 100


def test_buckets_are_step_ranges_so_a_dense_stretch_shares_one_bucket() -> None:
    # 1000 points in steps 1-1000, then one point every 10 000 steps up to 100 001: ten buckets of
    # 10 000 steps; the dense stretch is the first bucket and keeps only its low and high.
    dense = [Point(s, math.sin(s), 0.0) for s in range(1, 1001)]
    sparse = [Point(1 + 10_000 * k, float(k), 0.0) for k in range(1, 11)]
    points = [Point(0, 0.0, 0.0), *dense, *sparse]
    kept = min_max(points, 22)
    low = min(dense, key=lambda p: p.value or 0.0)
    high = max(dense, key=lambda p: p.value or 0.0)
    assert kept == [points[0], *sorted([low, high], key=lambda p: p.step), *sparse]


def test_an_empty_bucket_keeps_nothing_and_equal_values_keep_the_earlier_point() -> None:
    # Steps 0-99 and 900-999 of a constant series, buckets of 100 steps (1-100, ..., 901-1000):
    # those over the hole are empty, and each other keeps one point, its first (its values are
    # all equal).
    points = [Point(s, 1.0, 0.0) for s in [*range(100), *range(900, 1000)]]
    kept = min_max(points, 22)
    buckets = Buckets.between(0, 999, 22)
    assert buckets.width == 100
    assert [p.step for p in kept] == [0, 1, 900, 901, 999]


def test_non_finite_values_keep_one_gap_per_bucket_and_never_hide_a_finite_extreme() -> None:
    values: list[float | None] = [1.0] * 10 + [None] * 280 + [2.0] * 10
    values[150] = 3.0  # a finite point among the gaps is that bucket's low and high
    kept = min_max(_series(values, spacing=1), 10)
    assert len(kept) <= 10
    by_step = {p.step: p.value for p in kept}
    assert by_step[150] == 3.0
    # Buckets of 75 steps: 1-75 holds a low and a high of 1.0 (one point, the first), 76-150
    # holds only gaps and the 3.0, 151-225 only gaps (it keeps its first), 226-298 ends with 2.0.
    assert [p.step for p in kept] == [0, 1, 150, 151, 290, 299]
    assert by_step[151] is None


def test_too_few_points_are_refused() -> None:
    with pytest.raises(ValueError):
        min_max(_series([1.0] * 10), 3)
