"""The sweep statistics (``core.sweeps.stats``) against hand-computed values and against SciPy."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as scipy_stats

from core.sweeps import stats


def test_iqm_cuts_a_quarter_from_each_end_as_rliable_does() -> None:
    # 8 scores: cut 2 from each end -> mean of 3, 4, 5, 6 = 4.5 (the outliers do not matter).
    assert stats.iqm([-1000.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 1000.0]) == pytest.approx(4.5)
    # 5 scores: floor(5 / 4) = 1 cut from each end -> mean of 2, 3, 4 = 3.
    assert stats.iqm([5.0, 1.0, 4.0, 2.0, 3.0]) == pytest.approx(3.0)
    # Fewer than 4 runs cut nothing: the mean (a collapsed seed of three is not hidden).
    assert stats.iqm([-60.0, -12.0, -11.0]) == pytest.approx(-83.0 / 3)


@pytest.mark.parametrize("n", [1, 3, 4, 5, 7, 10, 31])
def test_iqm_equals_scipys_trim_mean(n: int) -> None:
    values = np.random.default_rng(n).normal(size=n)
    assert stats.iqm(values) == pytest.approx(scipy_stats.trim_mean(values, 0.25))


def test_iqm_along_an_axis_is_each_rows() -> None:
    rows = np.random.default_rng(0).normal(size=(6, 9))
    expected = [scipy_stats.trim_mean(row, 0.25) for row in rows]
    assert stats.iqm(rows, axis=1) == pytest.approx(expected)


def test_bootstrap_interval_of_two_values_by_hand() -> None:
    # Resampling two runs gives each bootstrap mean as 1 (both 1), 2 (one of each) or 3 (both 3)
    # with probabilities 1/4, 1/2, 1/4: the 2.5th percentile is 1 and the 97.5th is 3.
    ci = stats.bootstrap_ci([1.0, 3.0], stats.mean, reps=4000)
    assert (ci.low, ci.high) == (1.0, 3.0)
    # One run: no spread to resample.
    assert stats.bootstrap_ci([7.0]) == stats.Interval(7.0, 7.0)


def test_bootstrap_interval_covers_the_mean_and_narrows_with_more_runs() -> None:
    rng = np.random.default_rng(1)
    few = rng.normal(10.0, 2.0, size=5)
    many = rng.normal(10.0, 2.0, size=200)
    ci_few = stats.bootstrap_ci(few, stats.mean)
    ci_many = stats.bootstrap_ci(many, stats.mean)
    assert ci_few.low < few.mean() < ci_few.high
    assert ci_many.low < 10.0 < ci_many.high
    assert ci_many.high - ci_many.low < ci_few.high - ci_few.low
    # The normal approximation's half-width for 200 runs is 1.96 * 2 / sqrt(200) = 0.277.
    assert (ci_many.high - ci_many.low) / 2 == pytest.approx(0.277, rel=0.15)


def test_bootstrap_is_deterministic_for_a_seed() -> None:
    values = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0]
    assert stats.bootstrap_ci(values) == stats.bootstrap_ci(values)


def test_probability_of_improvement_by_hand() -> None:
    # Pairs of (x, y): x=1 beats none of 2, 2, 0 except 0 -> 1; x=2 ties 2 and 2 (0.5 each) and
    # beats 0 -> 2; x=3 beats all three -> 3. (1 + 2 + 3) / 9 = 2/3.
    assert stats.probability_of_improvement([1, 2, 3], [2, 2, 0]) == pytest.approx(2 / 3)
    assert stats.probability_of_improvement([5, 6], [1, 2]) == 1.0
    assert stats.probability_of_improvement([1, 2], [5, 6]) == 0.0


def test_probability_of_improvement_is_the_mann_whitney_u_over_pairs() -> None:
    rng = np.random.default_rng(2)
    x, y = rng.normal(1.0, 1.0, 7), rng.normal(0.0, 1.0, 5)
    u = scipy_stats.mannwhitneyu(x, y).statistic
    assert stats.probability_of_improvement(x, y) == pytest.approx(u / (7 * 5))


def test_probability_of_improvement_interval_holds_the_estimate() -> None:
    x, y = [1.0, 2.0, 3.0, 4.0], [1.5, 2.5, 0.0]
    p = stats.probability_of_improvement(x, y)
    ci = stats.probability_of_improvement_ci(x, y)
    assert 0.0 <= ci.low <= p <= ci.high <= 1.0
    separated = stats.probability_of_improvement_ci([10.0, 11.0], [0.0, 1.0])
    assert separated == stats.Interval(1.0, 1.0)


def test_step_value_holds_the_last_point() -> None:
    steps, values = [100, 200, 300], [1.0, 2.0, 3.0]
    assert stats.step_value(steps, values, 50) is None
    assert stats.step_value(steps, values, 100) == 1.0
    assert stats.step_value(steps, values, 250) == 2.0
    assert stats.step_value(steps, values, 10_000) == 3.0


def test_aggregate_curve_by_hand() -> None:
    series = [([100, 200], [1.0, 3.0]), ([100, 300], [3.0, 7.0]), ([300], [11.0])]
    curve = stats.aggregate_curve(series, [50, 100, 200, 300])
    # Step 50: no run has a value yet, so it is left out.
    assert [p.step for p in curve] == [100, 200, 300]
    # Step 100: runs 1 and 2 -> (1 + 3) / 2; step 200: 3 and 3 (run 2 holds 3) -> 3;
    # step 300: 3, 7, 11 -> 7.
    assert [p.mean for p in curve] == [2.0, 3.0, 7.0]
    assert [p.runs for p in curve] == [2, 2, 3]
    assert curve[1].low == curve[1].high == 3.0
    assert curve[2].low < 7.0 < curve[2].high


def test_common_grid_is_every_step_or_an_even_thinning() -> None:
    assert stats.common_grid([[300, 100], [200, 100]]) == [100, 200, 300]
    grid = stats.common_grid([list(range(0, 10_000, 10))], max_points=50)
    assert len(grid) == 50
    assert grid[0] == 0 and grid[-1] == 9990
