"""A sweep's search space and its expansion into validated experiment specs
(``core.sweeps.space``): no database."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats as scipy_stats

from core.quotas import check_spec_bounds
from core.settings import Settings
from core.sweeps import space, tpe
from learners.spec import FieldError, SpecError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXAMPLE = EXAMPLES / "ddpg_pendulum.json"


@pytest.fixture
def base() -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(EXAMPLE.read_text())
    spec.pop("seed")
    return spec


def _errors(body: dict[str, Any], expand: bool = False) -> list[FieldError]:
    with pytest.raises(SpecError) as caught:
        sweep = space.parse_sweep(body)
        if expand:
            space.expand(sweep)
    return caught.value.errors


def test_grid_is_every_combination_crossed_with_the_seeds(base: dict[str, Any]) -> None:
    sweep = space.parse_sweep(
        {
            "base": base,
            "space": {
                "grid": {
                    "hyperparameters.learning_rate_actor": [1e-3, 3e-4],
                    "env.num_envs": [2, 4, 8],
                }
            },
            "seeds": [7, 9],
        }
    )
    assert space.run_count(sweep) == 12
    expansion = space.expand(sweep)
    assert [c.key for c in expansion.configurations] == [f"c{i}" for i in range(6)]
    assert expansion.configurations[1].params == {
        "hyperparameters.learning_rate_actor": 1e-3,
        "env.num_envs": 4,
    }
    assert len(expansion.children) == 12
    # Seed-major: every configuration's first seed starts before any second one.
    assert [c.seed for c in expansion.children] == [7] * 6 + [9] * 6
    child = expansion.children[7]
    assert (child.config, child.seed) == ("c1", 9)
    assert child.spec["seed"] == 9
    assert child.spec["env"]["num_envs"] == 4
    assert child.spec["hyperparameters"]["learning_rate_actor"] == 1e-3
    assert child.spec["name"] == "pendulum-ddpg c1 s9"
    # Everything else comes from the base, with the spec's defaults filled in.
    assert child.spec["total_steps"] == base["total_steps"]
    assert child.spec["max_restarts"] == 3


def test_a_seed_count_means_seeds_zero_to_n_minus_one(base: dict[str, Any]) -> None:
    expansion = space.expand(space.parse_sweep({"base": base, "seeds": 3, "name": "plain"}))
    assert [c.key for c in expansion.configurations] == ["c0"]
    assert [(c.seed, c.spec["name"]) for c in expansion.children] == [
        (0, "plain c0 s0"),
        (1, "plain c0 s1"),
        (2, "plain c0 s2"),
    ]


def test_a_path_into_a_missing_object_creates_it(base: dict[str, Any]) -> None:
    base.pop("hyperparameters")
    sweep = space.parse_sweep(
        {"base": base, "space": {"grid": {"hyperparameters.gamma": [0.9]}}, "seeds": 1}
    )
    assert space.expand(sweep).children[0].spec["hyperparameters"]["gamma"] == 0.9


def test_random_draws_are_reproducible_and_crossed_with_the_grid(base: dict[str, Any]) -> None:
    body = {
        "base": base,
        "space": {
            "grid": {"env.num_envs": [2, 4]},
            "random": {
                "hyperparameters.gamma": {"uniform": [0.9, 0.99]},
                "hyperparameters.learning_rate_actor": {"log_uniform": [1e-5, 1e-2]},
                "hyperparameters.batch_size": {"int_uniform": [32, 64]},
                "hyperparameters.tau": {"choice": [0.005, 0.01]},
            },
            "num_samples": 3,
            "seed": 11,
        },
        "seeds": 1,
    }
    first = space.expand(space.parse_sweep(body)).configurations
    again = space.expand(space.parse_sweep(body)).configurations
    assert first == again
    assert len(first) == 6
    # Each grid value meets the same three draws.
    draws = [{k: v for k, v in c.params.items() if k != "env.num_envs"} for c in first]
    assert draws[:3] == draws[3:]
    for params in draws:
        assert 0.9 <= params["hyperparameters.gamma"] <= 0.99
        assert 1e-5 <= params["hyperparameters.learning_rate_actor"] <= 1e-2
        assert params["hyperparameters.batch_size"] in range(32, 65)
        assert params["hyperparameters.tau"] in (0.005, 0.01)
    body["space"]["seed"] = 12  # type: ignore[index]
    assert space.expand(space.parse_sweep(body)).configurations != first


def test_distributions_have_the_right_shape() -> None:
    uniform = space.SearchSpace(random={"x": {"uniform": [2.0, 4.0]}}, num_samples=1000)
    log = space.SearchSpace(random={"x": {"log_uniform": [1e-4, 1.0]}}, num_samples=1000)
    ints = space.SearchSpace(random={"x": {"int_uniform": [1, 3]}}, num_samples=1000)
    u = np.array([c.params["x"] for c in space.configurations(uniform)])
    assert scipy_stats.kstest((u - 2.0) / 2.0, "uniform").pvalue > 0.001
    logs = np.log10([c.params["x"] for c in space.configurations(log)])
    assert scipy_stats.kstest((logs + 4.0) / 4.0, "uniform").pvalue > 0.001
    counts = np.bincount([c.params["x"] for c in space.configurations(ints)], minlength=4)
    assert counts[0] == 0 and all(250 < c < 420 for c in counts[1:])


def test_one_bad_child_names_the_parameter_its_value_and_the_reason(base: dict[str, Any]) -> None:
    errors = _errors(
        {"base": base, "space": {"grid": {"hyperparameters.learning_rate_actor": [1e-3, -1]}}},
        expand=True,
    )
    assert len(errors) == 1
    assert errors[0].field == "space.grid.hyperparameters.learning_rate_actor"
    assert errors[0].reason.startswith("value -1 in configuration c1: ")
    assert "greater than 0" in errors[0].reason


def test_a_bad_base_is_named_once_not_once_per_child(base: dict[str, Any]) -> None:
    base["total_steps"] = -5
    grid = {"grid": {"hyperparameters.learning_rate_actor": [1e-3, 3e-4, 1e-4]}}
    errors = _errors({"base": base, "space": grid, "seeds": 5}, expand=True)
    assert errors == [FieldError("base.total_steps", "Input should be greater than 0")]


def test_a_problem_only_some_combinations_have_names_them(base: dict[str, Any]) -> None:
    def small_only(spec: Any) -> Any:
        if spec.env.num_envs * spec.hyperparameters["batch_size"] > 8 * 256:
            raise SpecError([FieldError("backend", "over the memory budget")])
        return spec

    grid = {"grid": {"env.num_envs": [1, 16], "hyperparameters.batch_size": [128, 256]}}
    sweep = space.parse_sweep({"base": base, "space": grid})
    with pytest.raises(SpecError) as caught:
        space.expand(sweep, small_only)
    assert caught.value.errors == [
        FieldError(
            "base.backend",
            "with env.num_envs=16, hyperparameters.batch_size=256: over the memory budget",
        )
    ]


def test_an_unknown_path_is_refused_on_its_swept_field(base: dict[str, Any]) -> None:
    errors = _errors(
        {"base": base, "space": {"grid": {"hyperparameters.no_such_thing": [1]}}}, expand=True
    )
    assert [e.field for e in errors] == ["space.grid.hyperparameters.no_such_thing"]


def test_a_bound_check_is_applied_to_each_child(base: dict[str, Any]) -> None:
    def at_most_four_envs(spec: Any) -> Any:
        if spec.env.num_envs > 4:
            raise SpecError([FieldError("env.num_envs", "more than 4 envs")])
        return spec

    sweep = space.parse_sweep({"base": base, "space": {"grid": {"env.num_envs": [2, 8]}}})
    with pytest.raises(SpecError) as caught:
        space.expand(sweep, at_most_four_envs)
    assert caught.value.errors == [
        FieldError("space.grid.env.num_envs", "value 8 in configuration c1: more than 4 envs")
    ]


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        ({"seeds": [1, 1]}, "seeds", "each seed once"),
        ({"seeds": 0}, "seeds", "between 1 and 100"),
        ({"seeds": []}, "seeds", "between 1 and 100"),
        ({"space": {"grid": {"seed": [1, 2]}}}, "space.grid.seed", "cannot be swept"),
        ({"space": {"grid": {"name": ["a"]}}}, "space.grid.name", "cannot be swept"),
        ({"space": {"grid": {"env..x": [1]}}}, "space.grid.env..x", "dotted names"),
        ({"space": {"grid": {"total_steps": []}}}, "space.grid.total_steps", "between 1 and 100"),
        (
            {"space": {"grid": {"x": [1]}, "random": {"x": {"choice": [1]}}}},
            "space.grid.x",
            "also in space.random",
        ),
        ({"space": {"random": {"x": {"beta": [1, 2]}}}}, "space.random.x", "one key of"),
        ({"space": {"random": {"x": {"uniform": [2, 1]}}}}, "space.random.x.uniform", "below"),
        ({"space": {"random": {"x": {"uniform": [1]}}}}, "space.random.x.uniform", "[low, high]"),
        (
            {"space": {"random": {"x": {"log_uniform": [0, 1]}}}},
            "space.random.x.log_uniform",
            "above 0",
        ),
        (
            {"space": {"random": {"x": {"int_uniform": [0.5, 2]}}}},
            "space.random.x.int_uniform",
            "integers",
        ),
        (
            {"space": {"random": {"x": {"choice": []}}}},
            "space.random.x.choice",
            "between 1 and 100",
        ),
        ({"max_concurrent": 0}, "max_concurrent", "greater than or equal to 1"),
        ({"surprise": 1}, "surprise", "Extra inputs"),
    ],
)
def test_the_sweeps_own_fields_are_checked(
    base: dict[str, Any], change: dict[str, Any], field: str, reason: str
) -> None:
    errors = _errors({"base": base, **change})
    assert any(e.field == field and reason in e.reason for e in errors), errors


def test_the_base_must_leave_the_seed_to_the_sweep(base: dict[str, Any]) -> None:
    errors = _errors({"base": {**base, "seed": 3}})
    assert [e.field for e in errors] == ["base.seed"]


def test_not_an_object_is_refused() -> None:
    assert _errors([1, 2])[0].field == "body"  # type: ignore[arg-type]


def test_run_count_needs_no_expansion(base: dict[str, Any]) -> None:
    sweep = space.parse_sweep(
        {
            "base": base,
            "space": {
                "grid": {"a": list(range(100)), "b": list(range(100))},
                "random": {"c": {"uniform": [0, 1]}},
                "num_samples": 1000,
            },
            "seeds": 100,
        }
    )
    assert space.run_count(sweep) == 100 * 100 * 1000 * 100


@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("sweep_*.json")), ids=lambda p: p.name)
def test_every_example_sweep_expands_within_the_default_bounds(example: Path) -> None:
    settings = Settings(database_url="sqlite://")
    sweep = space.parse_sweep(json.loads(example.read_text()))

    checked: list[Any] = []

    def bounded(spec: Any) -> Any:
        check_spec_bounds(spec, settings)
        checked.append(spec)
        return spec

    expansion = space.expand(sweep, bounded)

    if not sweep.proposes:  # a grid, random draws or ASHA: every run stored at submission
        assert len(expansion.children) == space.run_count(sweep) > 1
    elif (population := sweep.population) is not None:
        # PBT: the corners once each, then round 0's runs, one per member; the rest come later.
        members = population.population
        assert len(expansion.children) == members < space.run_count(sweep)
        assert len(checked) == len(tpe.reachable(sweep.space.random)) + members
    else:
        # A search's runs are proposed later: the corners of its space were checked, once each.
        assert expansion.children == [] and space.run_count(sweep) > 1
        assert len(checked) == len(tpe.reachable(sweep.space.random))
