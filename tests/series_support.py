"""Metric series the chart and retention tests build their cases from."""

from __future__ import annotations

import math
import random

from core.downsample import Point


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
