"""Metric series the chart and retention tests build their cases from, and the summaries
(``metric_tiers``) stored series must have."""

from __future__ import annotations

import itertools
import math
import random

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.metrics.downsample import BASE_TIER, TOP_TIER, Point, tier_width
from core.models import MetricTierRow


def noisy(seed: int, length: int, period: float) -> list[Point]:
    """Uneven steps with a hole, a sine of ``period`` points plus noise rounded to one decimal
    (many equal values), a spike, a dip and runs of non-finite values."""
    rng = random.Random(seed)
    points: list[Point] = []
    step = rng.randrange(1, 50)
    for k in range(length):
        value: float | None = round(math.sin(k / period) + rng.gauss(0, 0.3), 1)
        if k == length // 3:
            value = 1e6
        if k == 2 * length // 3:
            value = -1e6
        if length // 2 <= k < length // 2 + 150 or rng.random() < 0.02:
            value = None
        points.append(Point(step, value, 1.7e9 + k))
        step += rng.randrange(1, 30) + (50_000 if k == length // 4 else 0)
    return points


def expected_tiers(series: dict[str, list[Point]]) -> set[tuple[object, ...]]:
    """Every ``metric_tiers`` row of these stored series, computed from their points in plain
    Python: (name, tier, bucket, points, first step and wall time, last step, then value, step
    and wall time of the lowest and of the highest finite point)."""
    rows: set[tuple[object, ...]] = set()
    for name, points in series.items():
        for tier in range(BASE_TIER, TOP_TIER + 1):
            width = tier_width(tier)
            for bucket, group in itertools.groupby(points, key=lambda p: p.step // width):
                kept = list(group)
                finite = [p for p in kept if p.value is not None]
                ends: list[object] = [None] * 6
                if finite:
                    low = min(finite, key=lambda p: p.value)  # type: ignore[arg-type,return-value]
                    high = max(finite, key=lambda p: p.value)  # type: ignore[arg-type,return-value]
                    ends = [
                        low.value,
                        low.step,
                        low.wall_time,
                        high.value,
                        high.step,
                        high.wall_time,
                    ]
                rows.add((
                    name, tier, bucket, len(kept), kept[0].step, kept[0].wall_time, kept[-1].step,
                    *ends,
                ))  # fmt: skip
    return rows


def stored_tiers(session: Session, experiment_id: str) -> set[tuple[object, ...]]:
    """The run's ``metric_tiers`` rows, in ``expected_tiers``' shape."""
    T = MetricTierRow
    query = select(
        T.name, T.tier, T.bucket, T.points, T.first_step, T.first_wall, T.last_step,
        T.low_value, T.low_step, T.low_wall, T.high_value, T.high_step, T.high_wall,
    ).where(T.experiment_id == experiment_id)  # fmt: skip
    return {tuple(row) for row in session.execute(query)}
