"""``core.metrics.downsample``: the rule in plain Python (the oracle ``test_series_sql`` holds the
SQL to). Short series unchanged; long ones bounded, their ends and each step bucket's extremes kept;
grids tiled by the tiers of ``core.metrics.tiers``, whose summaries merge to the rule's picks."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from core.metrics.downsample import (
    BASE_TIER,
    FANOUT,
    MIN_MULTIPLE,
    TOP_TIER,
    Grid,
    Point,
    extremes,
    min_max,
    tier_width,
)
from core.metrics.tiers import Summary, chart, roll_up


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


def test_a_grid_is_the_narrowest_that_fits_rounded_up_to_a_whole_number_of_tier_ranges() -> None:
    # 1000 steps in at most 100 buckets: a width above 1000 / 99, narrower than twice the finest
    # tier (64 steps), so it is read from the points.
    assert Grid.of(0, 1000, 202) == Grid(width=11, tier=0)
    assert Grid.of(0, 1000, 202).index(1000) == 90
    # 100 000 steps in at most 250: at least 402 wide, so 7 ranges of tier 3 (64 steps each).
    assert Grid.of(0, 100_000, 502) == Grid(width=448, tier=3)
    # One bucket must hold every step from 0.
    assert Grid.of(5, 10, 4) == Grid(width=11, tier=0)
    assert Grid.of(0, 10**9, 4) == Grid(width=4 * tier_width(TOP_TIER), tier=TOP_TIER)
    with pytest.raises(ValueError):
        Grid.of(0, 10, 3)


@pytest.mark.parametrize("seed", range(5))
def test_every_grid_fits_its_buckets_and_is_tiled_by_its_tier(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(2000):
        first = rng.choice([0, rng.randrange(10**6), rng.randrange(10**12)])
        last = first + rng.choice([1, rng.randrange(1, 10**4), rng.randrange(1, 10**10)])
        max_points = rng.choice([4, 5, 6, rng.randrange(4, 100_001)])
        grid = Grid.of(first, last, max_points)
        buckets = (max_points - 2) // 2
        assert grid.index(last) - grid.index(first) + 1 <= buckets
        narrowest = (last - first) // (buckets - 1) + 1 if buckets > 1 else last + 1
        if grid.tier == 0:
            assert grid.width == narrowest < MIN_MULTIPLE * tier_width(BASE_TIER)
            continue
        unit = tier_width(grid.tier)
        assert grid.width % unit == 0 and grid.width >= MIN_MULTIPLE * unit
        assert grid.width < narrowest + unit  # the smallest multiple
        if grid.tier < TOP_TIER:  # the coarsest tier that tiles it
            assert MIN_MULTIPLE * tier_width(grid.tier + 1) > narrowest


def test_every_bucket_keeps_its_own_high_and_low_in_step_order() -> None:
    # A sawtooth, one point per step, in buckets of 10 steps (1009 steps in at most 102 buckets):
    # each bucket (steps 0-9, 10-19, ...) holds one 0 and then one 9.
    points = _series([float(k % 10) for k in range(1010)], spacing=1)
    assert Grid.of(0, 1009, 206) == Grid(width=10, tier=0)
    kept = min_max(points, 206)
    assert [p.step for p in kept] == [s for k in range(101) for s in (10 * k, 10 * k + 9)]
    assert [p.value for p in kept] == [0.0, 9.0] * 101


def test_buckets_are_step_ranges_so_a_dense_stretch_shares_one_bucket() -> None:
    # 1000 points in steps 1-1000, then one point every 10 000 steps up to 100 001: buckets of
    # 12 288 steps (3 ranges of tier 6); the dense stretch lies in the first, with the first point
    # and the sparse point at 10 001, and gives that bucket only its low.
    dense = [Point(s, math.sin(s), 0.0) for s in range(1, 1001)]
    sparse = [Point(1 + 10_000 * k, 10.0 + k, 0.0) for k in range(1, 11)]
    points = [Point(0, 0.0, 0.0), *dense, *sparse]
    assert Grid.of(0, 100_001, 22) == Grid(width=12_288, tier=6)
    kept = min_max(points, 22)
    low = min(dense, key=lambda p: p.value or 0.0)
    assert [p for p in kept if 1 <= p.step <= 1000] == [low]
    assert kept[0] == points[0] and set(sparse) <= set(kept)


def test_an_empty_bucket_keeps_nothing_and_equal_values_keep_the_earlier_point() -> None:
    # Steps 0-99 and 900-999 of a constant series, buckets of 112 steps (0-111, ..., 896-1007):
    # those over the hole are empty, and each other keeps one point, its first (its values are
    # all equal); the last point is kept as well.
    points = [Point(s, 1.0, 0.0) for s in [*range(100), *range(900, 1000)]]
    kept = min_max(points, 22)
    assert Grid.of(0, 999, 22).width == 112
    assert [p.step for p in kept] == [0, 900, 999]


def test_non_finite_values_keep_one_gap_per_bucket_and_never_hide_a_finite_extreme() -> None:
    values: list[float | None] = [1.0] * 10 + [None] * 280 + [2.0] * 10
    values[150] = 3.0  # a finite point among the gaps is that bucket's low and high
    kept = min_max(_series(values, spacing=1), 12)
    assert len(kept) <= 12
    by_step = {p.step: p.value for p in kept}
    # Buckets of 75 steps: 0-74 holds a low and a high of 1.0 (one point, the first), 75-149 only
    # gaps (it keeps its first), 150-224 gaps and the 3.0, 225-299 ends with 2.0.
    assert [p.step for p in kept] == [0, 75, 150, 290, 299]
    assert by_step[150] == 3.0
    assert by_step[75] is None


def test_too_few_points_are_refused() -> None:
    with pytest.raises(ValueError):
        min_max(_series([1.0] * 10), 3)


@pytest.mark.parametrize("seed", range(5))
def test_summaries_merged_at_any_width_pick_what_the_rule_picks(seed: int) -> None:
    # Summaries of single points rolled up tier by tier, then into grid buckets, keep the same
    # steps as the rule's extremes over the points themselves (ties and gaps included).
    rng = random.Random(seed)
    points = [
        Point(s, rng.choice([None, round(rng.gauss(0, 1), 1), 0.0]), float(s))
        for s in sorted(rng.sample(range(200_000), 3000))
    ]
    parts = roll_up([Summary.of_point(p.step // 64, p) for p in points], 1)
    for tier in range(BASE_TIER, 8):
        unit = tier_width(tier)
        if tier > BASE_TIER:
            parts = roll_up(parts, FANOUT)
        assert [s.bucket for s in parts] == sorted({p.step // unit for p in points})
        for multiple in (1, 2, 3, 7):
            width = unit * multiple
            merged = roll_up(parts, multiple)
            groups = itertools.groupby(points, key=lambda p: p.step // width)
            expected = [(b, list(group)) for b, group in groups]
            assert [s.bucket for s in merged] == [b for b, _ in expected]
            for summary, (_, group) in zip(merged, expected, strict=True):
                assert summary.points == len(group)
                assert summary.first == (group[0].step, group[0].wall_time)
                assert summary.last_step == group[-1].step
                assert summary.picks() == extremes(group)
            # The one-pass merge of plain rows a chart uses gives the same picks and count.
            rows = [
                (s.bucket, s.points, *s.first, s.last_step, *(s.low or (None,) * 3),
                 *(s.high or (None,) * 3))
                for s in parts
            ]  # fmt: skip
            picks = [p for summary in merged for p in summary.picks()]
            assert chart(rows, multiple) == (picks, len(points))
