"""Drawing from a search space's distributions (``space.random``): one value of a ``choice``,
``uniform``, ``log_uniform`` or ``int_uniform``, from a given generator. Used by the random draws
of a sweep (``core.sweeps.space``) and by PBT's explore step (``core.sweeps.pbt``)."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import numpy as np


def sampler(distribution: dict[str, Any]) -> Callable[[np.random.Generator], Any]:
    """A function drawing one value of ``distribution`` from a generator; floats kept to six
    significant digits (``six``)."""
    kind, args = next(iter(distribution.items()))
    if kind == "choice":
        return lambda rng: copy.deepcopy(args[int(rng.integers(len(args)))])
    if kind == "int_uniform":
        return lambda rng: int(rng.integers(args[0], args[1] + 1))
    if kind == "log_uniform":
        low, high = math.log(args[0]), math.log(args[1])
        return lambda rng: six(math.exp(rng.uniform(low, high)))
    return lambda rng: six(float(rng.uniform(args[0], args[1])))


def six(value: float) -> float:
    """``value`` to six significant digits: configurations read (and print) cleanly."""
    return float(f"{value:.6g}")
