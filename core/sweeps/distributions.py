"""Drawing from a search space's distributions (``space.random``): one value of a ``choice``,
``uniform``, ``log_uniform`` or ``int_uniform``, from a given generator. Used by the random draws
of a sweep (``core.sweeps.space``) and by PBT's explore step (``core.sweeps.pbt``);
``distribution_errors`` checks a submitted one."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from learners.api import FieldError

DISTRIBUTIONS = ("choice", "uniform", "log_uniform", "int_uniform")


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


def distribution_errors(path: str, distribution: dict[str, Any]) -> list[FieldError]:
    """Why ``distribution`` at ``space.random.<path>`` is not one this module draws from."""
    field = f"space.random.{path}"
    if len(distribution) != 1 or next(iter(distribution)) not in DISTRIBUTIONS:
        kinds = ", ".join(DISTRIBUTIONS)
        return [
            FieldError(field, f'a distribution is one key of {kinds}, e.g. {{"uniform": [0, 1]}}')
        ]
    kind, args = next(iter(distribution.items()))
    if kind == "choice":
        ok = isinstance(args, list) and 1 <= len(args) <= 100
        return [] if ok else [FieldError(f"{field}.choice", "give between 1 and 100 values")]
    numbers = isinstance(args, list) and len(args) == 2
    numbers = numbers and all(isinstance(a, int | float) and not isinstance(a, bool) for a in args)
    if kind == "int_uniform" and not (numbers and all(isinstance(a, int) for a in args)):
        return [FieldError(f"{field}.int_uniform", "give [low, high], two integers")]
    if not numbers:
        return [FieldError(f"{field}.{kind}", "give [low, high], two numbers")]
    low, high = args
    if (
        not (math.isfinite(low) and math.isfinite(high))
        or low > high
        or (kind != "int_uniform" and low == high)
    ):
        return [FieldError(f"{field}.{kind}", f"low must be below high (got [{low}, {high}])")]
    if kind == "log_uniform" and low <= 0:
        return [FieldError(f"{field}.log_uniform", "low must be above 0")]
    return []


def draws_of(random: dict[str, dict[str, Any]], seed: int, count: int) -> list[dict[str, Any]]:
    """``count`` draws of every path of ``random``, reproducibly from ``seed``."""
    rng = np.random.default_rng(seed)
    samplers = {path: sampler(d) for path, d in random.items()}
    return [{path: sample(rng) for path, sample in samplers.items()} for _ in range(count)]
