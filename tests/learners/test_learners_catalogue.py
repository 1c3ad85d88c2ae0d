"""Env validation in specs: unknown ids, constructor kwargs (by signature), action kinds."""

from __future__ import annotations

from typing import Any

import pytest

from learners.admission.envs import trains_on, validate_env
from learners.admission.parse import parse_spec
from learners.enums import ActionKind, Algorithm, EnvSuite
from learners.envs.catalogue import action_kind, env_ids
from learners.envs.catalogue import suite as catalogue_suite
from learners.registry import entries, entry
from learners.spec import SpecError


def fields_of(errors: list[Any]) -> list[str]:
    return [e.field for e in errors]


def test_unknown_env_id() -> None:
    errors = validate_env(EnvSuite.GYMNASIUM, "CartPole-v9", {}, entry(Algorithm.DDPG))
    assert fields_of(errors) == ["env.id"]
    assert "CartPole-v9" in errors[0].reason and "Pendulum-v1" in errors[0].reason


def test_kwarg_the_constructor_does_not_take() -> None:
    errors = validate_env(
        EnvSuite.GYMNASIUM, "Pendulum-v1", {"gravity": 9.8}, entry(Algorithm.DDPG)
    )
    assert fields_of(errors) == ["env.kwargs.gravity"]
    assert "'g'" not in errors[0].reason and "g" in errors[0].reason.split("takes: ")[1]


def test_kwargs_the_constructor_takes() -> None:
    ddpg = entry(Algorithm.DDPG)
    assert validate_env(EnvSuite.GYMNASIUM, "Pendulum-v1", {"g": 9.81}, ddpg) == []
    # MuJoCo envs forward **kwargs to MujocoEnv: its parameters count as taken.
    assert (
        validate_env(EnvSuite.GYMNASIUM, "Hopper-v5", {"ctrl_cost_weight": 0.01, "width": 64}, ddpg)
        == []
    )


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"render_mode": "human"}, "env.kwargs.render_mode"),
        ({"xml_file": "/etc/passwd"}, "env.kwargs.xml_file"),
        ({"N": "three"}, "env.kwargs.N"),
        ({"N": 2.5}, "env.kwargs.N"),
        ({"continuous_actions": 1}, "env.kwargs.continuous_actions"),
        ({"local_ratio": True}, "env.kwargs.local_ratio"),
    ],
)
def test_refused_kwargs(kwargs: dict[str, Any], field: str) -> None:
    algo = next(iter(entries()))
    suite = EnvSuite.GYMNASIUM if "xml_file" in kwargs else EnvSuite.MPE
    env_id = "Hopper-v5" if suite == EnvSuite.GYMNASIUM else "simple_spread_v3"
    errors = validate_env(suite, env_id, kwargs, algo)
    assert field in fields_of(errors)


def test_action_kind_comes_from_the_continuous_actions_flag() -> None:
    assert action_kind(EnvSuite.MPE, "simple_tag_v3", {}) == ActionKind.DISCRETE
    assert (
        action_kind(EnvSuite.MPE, "simple_tag_v3", {"continuous_actions": True})
        == ActionKind.CONTINUOUS
    )
    assert action_kind(EnvSuite.GYMNASIUM, "HalfCheetah-v5", {}) == ActionKind.CONTINUOUS


@pytest.mark.parametrize(
    "algo", [e for e in entries() if EnvSuite.MPE in e.suites], ids=lambda e: e.algorithm.value
)
def test_action_kind_mismatch_names_the_flag(algo: Any) -> None:
    for kind in ActionKind:
        errors = validate_env(
            EnvSuite.MPE,
            "simple_spread_v3",
            {"continuous_actions": kind == ActionKind.CONTINUOUS},
            algo,
        )
        if kind in algo.action_kinds:
            assert errors == []
        else:
            assert fields_of(errors) == ["env.kwargs.continuous_actions"]
            assert str(algo.algorithm) in errors[0].reason


@pytest.mark.parametrize("algo", list(entries()), ids=lambda e: e.algorithm.value)
def test_every_algorithm_has_a_valid_env_in_each_suite(algo: Any) -> None:
    for suite in algo.suites:
        ids = [i for i in env_ids(suite) if trains_on(algo, suite, i)]
        if suite in (EnvSuite.GYMNASIUM, EnvSuite.MPE):
            assert ids, f"{algo.algorithm} trains on no {suite} env"
        continuous = ActionKind.CONTINUOUS in algo.action_kinds
        kwargs = {"continuous_actions": continuous} if suite == EnvSuite.MPE else {}
        for env_id in ids:
            kinds = catalogue_suite(suite).entry(env_id).action_kinds
            given = kwargs if len(kinds) > 1 else {}
            assert validate_env(suite, env_id, given, algo) == [], (suite, env_id)


def test_parse_spec_reports_env_and_hyperparameter_errors_together() -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(
            {
                "name": "x",
                "algorithm": "ddpg",
                "backend": "torch",
                "env": {"suite": "gymnasium", "id": "Pendulum-v1", "kwargs": {"gg": 1}},
                "total_steps": 100,
                "hyperparameters": {"tau": 2.0},
            }
        )
    assert set(fields_of(caught.value.errors)) == {"env.kwargs.gg", "hyperparameters.tau"}


def test_parse_spec_fills_defaults() -> None:
    spec = parse_spec(
        {
            "name": "x",
            "algorithm": "ddpg",
            "backend": "torch",
            "env": {"suite": "gymnasium", "id": "Pendulum-v1"},
            "total_steps": 100,
        }
    )
    assert spec.hyperparameters["tau"] == spec.config().tau
    assert set(spec.hyperparameters) == set(entry(Algorithm.DDPG).config.model_fields)


def _env_of(algorithm: str, env: dict[str, Any]) -> Any:
    spec = {"name": "x", "algorithm": algorithm, "backend": "torch", "env": env, "total_steps": 100}
    return parse_spec(spec).env


@pytest.mark.parametrize(
    "algo", [e for e in entries() if EnvSuite.MPE in e.suites], ids=lambda e: str(e.algorithm)
)
def test_an_mpe_spec_without_num_envs_gets_the_eight_the_tables_used(algo: Any) -> None:
    env_id = "simple_spread_v3"
    left_out = _env_of(algo.algorithm, {"suite": "mpe", "id": env_id})
    given = _env_of(algo.algorithm, {"suite": "mpe", "id": env_id, "num_envs": 1})

    assert left_out.num_envs == 8 == algo.env_defaults_for("mpe", env_id)["num_envs"]
    assert given.num_envs == 1  # a value the spec gives always wins


def test_maddpg_on_mpe_gets_continuous_actions_unless_the_spec_says_otherwise() -> None:
    left_out = _env_of("maddpg", {"suite": "mpe", "id": "simple_tag_v3"})
    discrete = _env_of(
        "maddpg",
        {"suite": "mpe", "id": "simple_tag_v3", "kwargs": {"continuous_actions": False}},
    )
    others = _env_of("mappo", {"suite": "mpe", "id": "simple_tag_v3"})
    pendulum = _env_of("ddpg", {"suite": "gymnasium", "id": "Pendulum-v1"})

    assert left_out.kwargs == {"continuous_actions": True}
    assert discrete.kwargs == {"continuous_actions": False}
    assert others.kwargs == {}  # MAPPO's tables are discrete, mpe2's default
    assert (pendulum.num_envs, pendulum.kwargs) == (1, {})


def test_a_list_argument_of_numbers_takes_numbers_only_and_rendering_kwargs_are_reserved() -> None:
    ddpg = entry(Algorithm.DDPG)
    refused = validate_env(
        "gymnasium", "Hopper-v5", {"healthy_z_range": ["/etc/passwd", "x"]}, ddpg
    )
    assert fields_of(refused) == ["env.kwargs.healthy_z_range"]
    assert "a list of 2 numbers" in refused[0].reason
    assert validate_env("gymnasium", "Hopper-v5", {"healthy_z_range": [0.7, 2]}, ddpg) == []
    for name in ("visual_options", "default_camera_config", "camera_id", "camera_name"):
        (error,) = validate_env("gymnasium", "Hopper-v5", {name: {}}, ddpg)
        assert error.field == f"env.kwargs.{name}" and "rendering" in error.reason
