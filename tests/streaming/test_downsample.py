"""``core.downsample.min_max``: short series unchanged, long ones bounded, extremes kept."""

from __future__ import annotations

import math

import pytest

from core.downsample import Point, min_max


def _series(values: list[float | None]) -> list[Point]:
    return [Point(step=10 * k, value=v, wall_time=float(k)) for k, v in enumerate(values)]


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


def test_every_bucket_keeps_its_own_high_and_low() -> None:
    # A sawtooth between two end points: each of the 100 buckets of 10 holds one 9 and one 0.
    points = _series([5.0] + [float(k % 10) for k in range(1000)] + [5.0])
    kept = min_max(points, 202)
    inner = kept[1:-1]
    assert len(inner) == 200
    assert sorted({p.value for p in inner}) == [0.0, 9.0]


def test_a_bucket_of_only_non_finite_values_keeps_one_gap() -> None:
    values: list[float | None] = [1.0] * 10 + [None] * 280 + [2.0] * 10
    kept = min_max(_series(values), 10)
    assert None in [p.value for p in kept]
    assert len(kept) <= 10


def test_too_few_points_are_refused() -> None:
    with pytest.raises(ValueError):
        min_max(_series([1.0] * 10), 3)
