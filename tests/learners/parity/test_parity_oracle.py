"""Every registered learner, PyTorch included, against the NumPy oracle: the stats of one update
equal the textbook update computed in float64 from the same weights and data.

Parity between backends cannot see a defect they share; this can. Each algorithm's oracle is in
``parity_reference`` (networks read from the portable checkpoint, losses from the shared math
over ``NumpyOps``). On-policy variants that take several gradient steps per update are left to the
parity tests: the oracle computes one step's losses.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from parity_assert import ONE_UPDATE, STAT_FLOOR, assert_close
from parity_cases import SUBSET_VARIANTS, VARIANTS, Variant, build, data, update, variants
from parity_reference import oracle_stats

from learners.algorithms.ppo import PPOConfig
from learners.enums import Algorithm, Backend
from learners.registry import built_pairs


def single_step(variant: Variant) -> bool:
    """An update that is one gradient step (every off-policy update is)."""
    config = variant.config
    return not isinstance(config, PPOConfig) or config.epochs == config.minibatches == 1


def oracle_params() -> list[Any]:
    return [
        pytest.param(a, b, v, id=f"{a.value}-{b.value}-{v.name}")
        for a, b in built_pairs()
        for v in variants(a, b)
        if single_step(v)
    ]


@pytest.mark.parametrize(("algorithm", "backend", "variant"), oracle_params())
def test_one_update_matches_the_oracle(
    algorithm: Algorithm, backend: Backend, variant: Variant
) -> None:
    learner = build(algorithm, backend, variant)
    batch = data(algorithm, variant, seed=0)
    untouched = copy.deepcopy(batch)  # an on-policy update writes its values into the rollout
    before = learner.state()
    stats = update(algorithm, learner, batch, 0)
    expected = oracle_stats(
        algorithm, variant.config, variant.info, before, learner.state(), untouched
    )
    assert expected, "the oracle computed nothing"
    for name, value in expected.items():
        assert_close(stats[name], value, ONE_UPDATE, f"{name} vs the oracle", floor=STAT_FLOOR)


def test_each_compiled_backends_variants_take_every_choice() -> None:
    """``SUBSET_VARIANTS`` names variants that exist; each backend's subset takes every choice the
    full set takes (each word of a variant's name: action kind, memory, layout, minibatching,
    critic, weighting, clipping); and together the subsets hold every variant."""
    for algorithm, make in VARIANTS.items():
        every = {v.name for v in make()}
        words = {w for name in every for w in name.split("-")}
        union: set[str] = set()
        for backend, subsets in SUBSET_VARIANTS.items():
            names = subsets[algorithm]
            assert names <= every, f"{algorithm} in {backend}: unknown {sorted(names - every)}"
            covered = {w for name in names for w in name.split("-")}
            missing = sorted(words - covered)
            assert not missing, f"{algorithm}: no {backend} variant takes {missing}"
            union |= names
        assert union == every, f"{algorithm}: no compiled backend runs {sorted(every - union)}"
