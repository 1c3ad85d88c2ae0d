"""Population-based training's decisions (``core.sweeps.pbt``) on synthetic results, and what a
PBT sweep may ask for (``core.sweeps.space``): no database, no training."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from core.sweeps import pbt, space
from core.sweeps.pbt import Member, PopulationSearch
from learners.spec import SpecError

SPACE = {
    "hyperparameters.learning_rate": {"log_uniform": [1e-4, 1e-2]},
    "hyperparameters.epochs_like": {"int_uniform": [1, 10]},
    "hyperparameters.gamma": {"choice": [0.9, 0.95, 0.99]},
}
SEARCH = PopulationSearch(method="pbt", population=8, round_steps=1000)


def _members(scores: list[float | None]) -> list[Member]:
    return [
        Member(
            i,
            {
                "hyperparameters.learning_rate": 1e-3 * (i + 1),
                "hyperparameters.epochs_like": i + 1,
                "hyperparameters.gamma": 0.95,
            },
            score,
        )
        for i, score in enumerate(scores)
    ]


def test_the_bottom_quantile_copies_the_top_and_the_rest_carry_on() -> None:
    scores: list[float | None] = [5.0, 1.0, 7.0, 3.0, 0.5, 6.0, 2.0, 4.0]
    decisions = pbt.decide(_members(scores), SEARCH, SPACE, space_seed=0, round_=0)
    assert decisions is not None
    assert [d.member for d in decisions] == list(range(8))
    # quantile 0.25 of 8: the two worst (members 4 and 1) copy one of the two best (2 and 5).
    exploited = {d.member: d.source for d in decisions if d.exploited}
    assert set(exploited) == {1, 4}
    assert set(exploited.values()) <= {2, 5}
    for d in decisions:
        if not d.exploited:
            assert d.source == d.member
            assert d.params == _members(scores)[d.member].params


def test_failed_members_are_replaced_and_an_all_failed_round_ends_the_search() -> None:
    scores: list[float | None] = [5.0, None, 7.0, 3.0, None, 6.0, 2.0, 4.0]
    decisions = pbt.decide(_members(scores), SEARCH, SPACE, space_seed=0, round_=3)
    assert decisions is not None
    exploited = {d.member for d in decisions if d.exploited}
    # The two failed members are the bottom quarter; each copies a top member.
    assert exploited == {1, 4}
    assert all(d.source in (2, 5) for d in decisions if d.exploited)
    # Three failed: each copies, past the quarter.
    scores = [5.0, None, 7.0, None, None, 6.0, 2.0, 4.0]
    decisions = pbt.decide(_members(scores), SEARCH, SPACE, space_seed=0, round_=3)
    assert decisions is not None
    assert {d.member for d in decisions if d.exploited} == {1, 3, 4}
    assert pbt.decide(_members([None] * 8), SEARCH, SPACE, space_seed=0, round_=0) is None


def test_decisions_are_a_function_of_the_results_the_seed_and_the_round() -> None:
    """What an API restart relies on: the same rows give the same round."""
    members = _members([5.0, 1.0, 7.0, 3.0, 0.5, 6.0, 2.0, 4.0])
    first = pbt.decide(members, SEARCH, SPACE, space_seed=4, round_=2)
    assert pbt.decide(members, SEARCH, SPACE, space_seed=4, round_=2) == first
    others = [pbt.decide(members, SEARCH, SPACE, space_seed=4, round_=r) for r in range(3, 8)]
    assert any(o != first for o in others)


def test_explore_stays_within_each_distribution_and_keeps_its_type() -> None:
    rng = np.random.default_rng(0)
    search = PopulationSearch(
        method="pbt", population=4, round_steps=10, resample_probability=0.3, factors=(0.5, 2.0)
    )
    params = {
        "hyperparameters.learning_rate": 1e-2,
        "hyperparameters.epochs_like": 10,
        "hyperparameters.gamma": 0.99,
    }
    seen_lr, seen_gamma = set(), set()
    for _ in range(300):
        params = pbt.explore(params, SPACE, search, rng)
        lr = params["hyperparameters.learning_rate"]
        assert isinstance(lr, float) and 1e-4 <= lr <= 1e-2
        epochs = params["hyperparameters.epochs_like"]
        assert isinstance(epochs, int) and 1 <= epochs <= 10
        assert params["hyperparameters.gamma"] in (0.9, 0.95, 0.99)
        seen_lr.add(lr)
        seen_gamma.add(params["hyperparameters.gamma"])
    assert len(seen_lr) > 20 and seen_gamma == {0.9, 0.95, 0.99}


def test_without_resampling_a_number_is_multiplied_by_one_of_the_factors() -> None:
    search = PopulationSearch(
        method="pbt", population=4, round_steps=10, resample_probability=0.0, factors=(0.8, 1.25)
    )
    rng = np.random.default_rng(1)
    one = {"hyperparameters.learning_rate": SPACE["hyperparameters.learning_rate"]}
    seen = {
        pbt.explore({"hyperparameters.learning_rate": 1e-3}, one, search, rng)[
            "hyperparameters.learning_rate"
        ]
        for _ in range(50)
    }
    assert seen == {8e-4, 1.25e-3}


def test_a_continuation_extends_the_source_run_and_its_schedule() -> None:
    source_spec: dict[str, Any] = {
        "name": "s m2 r1",
        "seed": 12,
        "total_steps": 2000,
        "hyperparameters": {"learning_rate": 1e-3},
        "schedule": [{"at_step": 1000, "hyperparameters": {"learning_rate": 2e-3}}],
        "init": {"experiment_id": "X" * 26, "checkpoint_id": "latest", "what": "run"},
    }
    source = {"hyperparameters.learning_rate": 2e-3}
    kept = pbt.Decision(member=2, source=2, params=dict(source))
    spec = pbt.continuation(source_spec, "R" * 26, kept, source, 2, SEARCH, "s m2 r2")
    assert spec["total_steps"] == 3000 and spec["seed"] == 12 and spec["name"] == "s m2 r2"
    assert spec["init"] == {"experiment_id": "R" * 26, "checkpoint_id": "latest", "what": "run"}
    assert spec["schedule"] == source_spec["schedule"]
    moved = pbt.Decision(member=5, source=2, params={"hyperparameters.learning_rate": 1.6e-3})
    spec = pbt.continuation(source_spec, "R" * 26, moved, source, 2, SEARCH, "s m5 r2")
    assert spec["schedule"][-1] == {"at_step": 2000, "hyperparameters": {"learning_rate": 1.6e-3}}
    assert spec["seed"] == 12, "a copied member takes on its source's lineage and seed"


MAPPO_BASE: dict[str, Any] = {
    "name": "pbt",
    "algorithm": "mappo",
    "backend": "torch",
    "env": {"suite": "mpe", "id": "simple_spread_v3", "num_envs": 4},
    "total_steps": 4000,
    "hyperparameters": {"linear_lr_decay": False, "rollout_length": 100},
    "evaluation": {"every_steps": 1000, "episodes": 2},
    "checkpoint": {"every_steps": 1000},
}


def _sweep(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "base": copy.deepcopy(MAPPO_BASE),
        "space": {
            "random": {
                "hyperparameters.learning_rate": {"log_uniform": [1e-4, 1e-2]},
                "hyperparameters.entropy_coef": {"uniform": [0.0, 0.05]},
            },
            "seed": 5,
        },
        "search": {"method": "pbt", "population": 4, "round_steps": 2000},
    }
    for path, value in changes.items():
        target = body
        parts = path.split("__")
        for part in parts[:-1]:
            target = target[part]
        target[parts[-1]] = value
    return body


def _refusals(body: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(SpecError) as refused:
        space.expand(space.parse_sweep(body))
    reasons: dict[str, str] = {}
    for e in refused.value.errors:
        reasons[e.field] = f"{reasons[e.field]} | {e.reason}" if e.field in reasons else e.reason
    return reasons


def test_round_zero_is_drawn_at_submission_with_each_members_seed() -> None:
    expansion = space.expand(space.parse_sweep(_sweep()))
    assert [c.key for c in expansion.configurations] == ["m0.r0", "m1.r0", "m2.r0", "m3.r0"]
    assert expansion.seeds == [5, 6, 7, 8]
    assert [c.seed for c in expansion.children] == [5, 6, 7, 8]
    for config, child in zip(expansion.configurations, expansion.children, strict=True):
        assert config.stored()["round"] == 0 and config.stored()["continues"] is None
        assert child.spec["total_steps"] == 2000
        assert (
            child.spec["hyperparameters"]["learning_rate"]
            == (config.params["hyperparameters.learning_rate"])
        )
    assert len({c.params["hyperparameters.learning_rate"] for c in expansion.configurations}) == 4
    assert space.run_count(space.parse_sweep(_sweep())) == 8


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        (
            {"space__random": {"hyperparameters.hidden_sizes": {"choice": [[32], [64]]}}},
            "space.random.hyperparameters.hidden_sizes",
            "cannot change hidden_sizes while it trains",
        ),
        (
            {"space__random": {"env.num_envs": {"choice": [2, 4]}}},
            "space.random.env.num_envs",
            "hyperparameters only",
        ),
        ({"space__grid": {"hyperparameters.gamma": [0.9]}}, "space.grid", "space.random only"),
        ({"seeds": 3}, "seeds", "space.seed + its index"),
        (
            {"base__hyperparameters": {"rollout_length": 100}},
            "base.hyperparameters.linear_lr_decay",
            "must be false in a pbt search",
        ),
        ({"search__round_steps": 3000}, "search.round_steps", "whole number"),
        ({"search__round_steps": 4000}, "search.round_steps", "at least two rounds"),
        ({"search__round_steps": 1200, "base__total_steps": 3600}, None, None),
        ({"search__factors": [0, 1.25]}, "search.factors.0", "greater than 0"),
        ({"search__round_steps": 200, "base__total_steps": 2000}, "search.round_steps", "400"),
    ],
)
def test_what_a_pbt_search_cannot_do_is_a_field_error(
    changes: dict[str, Any], field: str | None, words: str | None
) -> None:
    body = _sweep(**changes)
    if field is None:
        space.expand(space.parse_sweep(body))
        return
    reasons = _refusals(body)
    assert field in reasons, reasons
    assert words is not None and words in reasons[field], reasons[field]


def test_the_corners_of_the_space_are_checked_at_submission() -> None:
    body = _sweep(space__random={"hyperparameters.clip_eps": {"uniform": [0.1, 2.0]}})
    reasons = _refusals(body)
    assert any(
        f.startswith("space.random.hyperparameters.clip_eps") and "2.0" in r
        for f, r in reasons.items()
    ), reasons
