"""Limits on a spec (learners.admission.budget) and the memory estimate
(learners.admission.memory): the bounds refuse with the field and the limit, every catalogued
default passes, and the estimate's formulas agree with the buffers and networks the learners
really build."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from learners.admission.budget import MAX_ACTION_DIM, MAX_AGENTS, MAX_OBS_DIM, assess
from learners.admission.envs import trains_on
from learners.admission.parse import parse_spec
from learners.allocation import episode_bytes, plan, replay_row_bytes, rollout_bytes
from learners.buffers.episodes import EpisodeBuffer
from learners.buffers.replay import ReplayBuffer
from learners.buffers.rollout import RolloutBuffer
from learners.enums import ActionKind, Algorithm, Backend, EnvSuite
from learners.envs.base import EnvInfo
from learners.envs.catalogue import env_ids, env_shape
from learners.envs.catalogue import suite as catalogue_suite
from learners.envs.factory import make_vec_env
from learners.envs.shapes import EnvShape
from learners.registry import built_pairs, entries, entry
from learners.spec import EnvSpec, ExperimentSpec, SpecError

EXAMPLES = sorted(
    p
    for p in (Path(__file__).resolve().parents[2] / "examples").glob("*.json")
    if not p.name.startswith("sweep_")  # sweeps: tests/sweeps/test_sweeps_space.py
)
BUDGET = 4096  # MiB, Settings.run_memory_mb's default
CPUS = 16  # a worker's cores: they decide how many env worker processes a run starts


def spec_of(
    algorithm: Algorithm | str = Algorithm.MADDPG,
    env: dict[str, Any] | None = None,
    backend: Backend = Backend.TORCH,
    **top: Any,
) -> ExperimentSpec:
    data: dict[str, Any] = {
        "name": "budget",
        "algorithm": algorithm,
        "backend": backend,
        "env": env or {"suite": "mpe", "id": "simple_spread_v3"},
        "total_steps": 100_000,
    }
    return parse_spec({**data, **top})


def refusals(spec: ExperimentSpec, budget: int = BUDGET) -> dict[str, str]:
    return {e.field: e.reason for e in assess(spec, budget, cpus=CPUS).errors}


# -- structural bounds ----------------------------------------------------------------------------


def test_thousands_of_agents_are_refused_by_name_before_any_env_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A spy on the vector engine's scenario builder: choosing the default engine must not build
    # a 5,000-agent scenario (25 million body pairs) to find the count out of bounds.
    import learners.envs.vector.engine as engine

    built: list[str] = []
    real = engine.build_scenario
    monkeypatch.setattr(engine, "build_scenario", lambda *a: built.append(a[0]) or real(*a))
    spec = spec_of(
        Algorithm.MAPPO,
        {"suite": "mpe", "id": "simple_spread_v3", "num_envs": 4, "kwargs": {"N": 5000}},
    )
    result = assess(spec, BUDGET, cpus=CPUS)
    assert {e.field: e.reason for e in result.errors} == {
        "env.kwargs.N": "at most 32 agents on simple_spread_v3 (got 5000)"
    }
    assert result.estimate is None
    assert built == []


@pytest.mark.parametrize(
    ("env_id", "kwargs", "field", "reason"),
    [
        ("simple_spread_v3", {"N": 0}, "N", "at least 1 agents"),
        ("simple_adversary_v3", {"N": 32}, "N", "at most 31 good agents"),
        (
            "simple_tag_v3",
            {"num_good": 5, "num_adversaries": 30},
            "num_adversaries",
            "at most 32 agents on simple_tag_v3 (num_good + num_adversaries = 35)",
        ),
        ("simple_tag_v3", {"num_obstacles": 33}, "num_obstacles", "at most 32 obstacles"),
        ("simple_push_v3", {"max_cycles": 5000}, "max_cycles", "at most 1,000 steps"),
        ("simple_spread_v3", {"num_agent_neighbors": 0}, "num_agent_neighbors", "at least 1"),
        ("simple_tag_v3", {"num_landmark_neighbors": 99}, "num_landmark_neighbors", "at most 32"),
        ("simple_spread_v3", {"num_agent_neighbors": "all"}, "num_agent_neighbors", "integer"),
    ],
)
def test_mpe_counts_and_sizes_past_their_bounds(
    env_id: str, kwargs: dict[str, Any], field: str, reason: str
) -> None:
    spec = spec_of(Algorithm.MAPPO, {"suite": "mpe", "id": env_id, "kwargs": kwargs})
    found = refusals(spec)
    assert list(found) == [f"env.kwargs.{field}"]
    assert reason in found[f"env.kwargs.{field}"]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"width": 100_000}, "env.kwargs.width"),
        ({"height": 100_000}, "env.kwargs.height"),
        ({"frame_skip": 10_000}, "env.kwargs.frame_skip"),
        ({"max_geom": 10**9}, "env.kwargs.max_geom"),
    ],
)
def test_mujoco_kwargs_that_size_a_step_or_a_rendering(kwargs: dict[str, Any], field: str) -> None:
    spec = spec_of(Algorithm.DDPG, {"suite": "gymnasium", "id": "Hopper-v5", "kwargs": kwargs})
    assert list(refusals(spec)) == [field]


def test_the_largest_scenarios_allowed_pass_and_stay_within_the_size_backstops() -> None:
    largest: list[tuple[str, dict[str, Any]]] = [
        ("simple_spread_v3", {"N": MAX_AGENTS, "num_agent_neighbors": MAX_AGENTS}),
        ("simple_spread_v3", {"N": MAX_AGENTS, "num_landmark_neighbors": None}),
        ("simple_adversary_v3", {"N": MAX_AGENTS - 1}),
        ("simple_tag_v3", {"num_good": 16, "num_adversaries": 16, "num_obstacles": 32}),
    ]
    for env_id, kwargs in largest:
        shape = env_shape(EnvSuite.MPE, env_id, kwargs)
        assert shape.num_agents == MAX_AGENTS
        assert shape.obs_dim <= MAX_OBS_DIM and shape.action_dim <= MAX_ACTION_DIM
        spec = spec_of(Algorithm.MAPPO, {"suite": "mpe", "id": env_id, "kwargs": kwargs})
        assert refusals(spec) == {}


def test_copies_times_agents() -> None:
    env = {"suite": "mpe", "id": "simple_spread_v3", "kwargs": {"N": 32}, "engine": "mpe2"}
    # 64 copies of 32 agents are allowed (though a default MAPPO on them is over 4 GiB).
    assert refusals(spec_of(Algorithm.MAPPO, {**env, "num_envs": 64}), budget=10**6) == {}
    found = refusals(spec_of(Algorithm.MAPPO, {**env, "num_envs": 65}))
    assert list(found) == ["env.num_envs"]
    assert "at most 64 copies of simple_spread_v3 with 32 agents" in found["env.num_envs"]
    # The vector engine steps every copy in one array operation: 32 times the rows.
    vector = {**env, "engine": "vector"}
    assert refusals(spec_of(Algorithm.MAPPO, {**vector, "num_envs": 2048}), budget=10**6) == {}
    found = refusals(spec_of(Algorithm.MAPPO, {**vector, "num_envs": 2049}), budget=10**6)
    assert "at most 2,048 copies of simple_spread_v3 with 32 agents" in found["env.num_envs"]


def test_more_than_256_copies_need_the_vector_engine() -> None:
    spread = {"suite": "mpe", "id": "simple_spread_v3", "num_envs": 257}
    assert refusals(spec_of(Algorithm.MAPPO, {**spread, "engine": "mpe2"})) == {
        "env.num_envs": "at most 256 copies on the mpe2 engine (got 257); the vector engine "
        "(env.engine: vector, mpe scenarios) steps up to 4,096"
    }
    pendulum = {"suite": "gymnasium", "id": "Pendulum-v1", "num_envs": 257}
    found = refusals(spec_of(Algorithm.DDPG, pendulum))
    assert found["env.num_envs"].startswith("at most 256 copies on the gymnasium suite")
    # 4,096 copies on the vector engine (the default for mpe) are taken, within the memory
    # budget: PPO's whole rollout in one minibatch is over it, and the refusal says what to lower;
    # the MPE default's four minibatches fit.
    many = {**spread, "num_envs": 4096}
    assert spec_of(Algorithm.MAPPO, many).env.engine == "vector"
    whole = spec_of(Algorithm.MAPPO, many, hyperparameters={"minibatches": 1})
    assert list(refusals(whole)) == ["hyperparameters.minibatches"]
    for algorithm in (Algorithm.MAPPO, Algorithm.IPPO):
        assert refusals(spec_of(algorithm, many)) == {}, algorithm
        split = spec_of(algorithm, many, hyperparameters={"minibatches": 8})
        assert refusals(split) == {}, algorithm
    assert refusals(spec_of(Algorithm.MADDPG, many)) == {}
    # Its copies cost a fraction of mpe2's (no pygame surface, no env worker processes).
    envs = {
        engine: _part(
            spec_of(Algorithm.MAPPO, {**spread, "num_envs": 256, "engine": engine}), "envs"
        )
        for engine in ("mpe2", "vector")
    }
    assert envs["vector"] < envs["mpe2"] / 10


def _part(spec: ExperimentSpec, name: str) -> float:
    estimate = assess(spec, BUDGET, cpus=CPUS).estimate
    assert estimate is not None
    return estimate.as_dict()[name]


def test_total_steps_and_layer_widths_are_bounded_by_the_spec_itself() -> None:
    data = {
        "name": "budget",
        "algorithm": "maddpg",
        "backend": "torch",
        "env": {"suite": "mpe", "id": "simple_spread_v3", "kwargs": {"continuous_actions": True}},
        "total_steps": 200_000_000,
    }
    with pytest.raises(SpecError) as too_long:
        parse_spec(data)
    assert [(e.field, "100000000" in e.reason) for e in too_long.value.errors] == [
        ("total_steps", True)
    ]
    wide = {**data, "total_steps": 1000, "hyperparameters": {"hidden_sizes": [0, 64, 4096, True]}}
    with pytest.raises(SpecError) as refused:
        parse_spec(wide)
    fields = {e.field: e.reason for e in refused.value.errors}
    assert set(fields) == {
        "hyperparameters.hidden_sizes.0",
        "hyperparameters.hidden_sizes.2",
        "hyperparameters.hidden_sizes.3",
    }
    assert "2048" in fields["hyperparameters.hidden_sizes.2"]
    assert refusals(spec_of(hyperparameters={"hidden_sizes": [2048]})) == {}


def test_kwargs_the_scenario_itself_refuses_are_refused_at_submission() -> None:
    env = {"suite": "mpe", "id": "simple_spread_v3", "kwargs": {"local_ratio": 2.0}}
    spec = spec_of(Algorithm.MAPPO, env)
    found = refusals(spec)
    assert list(found) == ["env.kwargs"]
    assert "simple_spread_v3 refuses these arguments" in found["env.kwargs"]


# -- the memory estimate --------------------------------------------------------------------------


def test_a_huge_replay_buffer_is_refused_by_the_estimate() -> None:
    spec = spec_of(Algorithm.MADDPG, hyperparameters={"buffer_size": 10_000_000})
    result = assess(spec, BUDGET, cpus=CPUS, budget_name="MARLFORGE_RUN_MEMORY_MB")
    assert [e.field for e in result.errors] == ["hyperparameters.buffer_size"]
    reason = result.errors[0].reason
    assert reason.startswith("the run would need about ")
    assert "(replay buffer " in reason and ", networks " in reason and ", envs " in reason
    assert reason.endswith("against the per-run budget of 4,096 MiB (MARLFORGE_RUN_MEMORY_MB)")
    assert result.estimate is not None and result.estimate.total_mib > BUDGET
    assert result.estimate.largest().name == "replay buffer"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_spec_passes(example: Path) -> None:
    assert refusals(parse_spec(json.loads(example.read_text()))) == {}


def _default_cases() -> list[tuple[Algorithm, Backend, str, str, bool]]:
    cases = []
    for algo, backend in built_pairs():
        algo_entry = entry(algo)
        for suite in sorted(algo_entry.suites):
            for env_id in (i for i in env_ids(suite) if trains_on(algo_entry, suite, i)):
                offered = catalogue_suite(suite).entry(env_id).action_kinds
                for kind in sorted(algo_entry.action_kinds & offered):
                    cases.append((algo, backend, suite, env_id, kind == ActionKind.CONTINUOUS))
    return cases


@pytest.mark.parametrize(
    ("algorithm", "backend", "suite", "env_id", "continuous"), _default_cases()
)
def test_every_algorithm_default_passes_on_every_catalogued_env(
    algorithm: Algorithm, backend: Backend, suite: str, env_id: str, continuous: bool
) -> None:
    kwargs = {"continuous_actions": continuous} if suite == EnvSuite.MPE else {}
    spec = spec_of(algorithm, {"suite": suite, "id": env_id, "kwargs": kwargs}, backend)
    result = assess(spec, BUDGET, cpus=CPUS)
    assert result.errors == ()
    assert result.estimate is not None
    assert 0 < result.estimate.total_mib <= BUDGET


def _total(spec: ExperimentSpec) -> float:
    estimate = assess(spec, BUDGET, cpus=CPUS).estimate
    assert estimate is not None
    return estimate.total_mib


@pytest.mark.parametrize("algorithm", [e.algorithm for e in entries()])
def test_the_estimate_grows_with_the_buffer_and_the_copies(algorithm: Algorithm) -> None:
    algo = entry(algorithm)
    suite = sorted(algo.suites)[0]
    env = {"suite": suite, "id": env_ids(suite)[0], "num_envs": 4}
    base = spec_of(algorithm, env)
    assert _total(spec_of(algorithm, {**env, "num_envs": 32})) > _total(base)
    sizes = {"buffer_size", "rollout_length"} & set(algo.config.model_fields)
    (size,) = sizes
    bigger = {size: 4 * base.hyperparameters[size]}
    assert _total(spec_of(algorithm, env, hyperparameters=bigger)) > _total(base)


def test_a_lower_budget_refuses_what_the_default_accepts() -> None:
    spec = spec_of(Algorithm.WQMIX, hyperparameters={"buffer_size": 1_000_000})
    estimate = _total(spec)
    assert refusals(spec) == {}
    assert list(refusals(spec, budget=int(estimate) - 1)) == ["hyperparameters.buffer_size"]


# -- the formulas against what the learners build --------------------------------------------------


def _info(env: dict[str, Any], num_envs: int = 3) -> EnvInfo:
    vec = make_vec_env(EnvSpec.model_validate(env), 0, num_envs=num_envs, workers=0)
    vec.close()
    return vec.info


ENVS = [
    {"suite": "gymnasium", "id": "Pendulum-v1"},
    {"suite": "mpe", "id": "simple_spread_v3"},
    {"suite": "mpe", "id": "simple_adversary_v3", "kwargs": {"continuous_actions": True}},
]


def _array_bytes(obj: Any) -> int:
    """Bytes of the NumPy arrays an object holds, in attributes or dicts of them."""
    values = obj.values() if isinstance(obj, dict) else vars(obj).values()
    return sum(
        v.nbytes if isinstance(v, np.ndarray) else _array_bytes(v) if isinstance(v, dict) else 0
        for v in values
    )


@pytest.mark.parametrize("env", ENVS, ids=lambda e: e["id"])
def test_shapes_without_building_match_the_built_env(env: dict[str, Any]) -> None:
    info = _info(env)
    assert env_shape(EnvSuite(env["suite"]), env["id"], env.get("kwargs", {})) == (
        EnvShape.from_info(info)
    )


@pytest.mark.parametrize("env_id", ["HalfCheetah-v5", "Hopper-v5"])
@pytest.mark.parametrize("exclude", [True, False])
def test_mujoco_shapes_from_the_table_match_gymnasium(env_id: str, exclude: bool) -> None:
    kwargs = {"exclude_current_positions_from_observation": exclude}
    info = _info({"suite": "gymnasium", "id": env_id, "kwargs": kwargs}, num_envs=1)
    assert env_shape(EnvSuite.GYMNASIUM, env_id, kwargs) == EnvShape.from_info(info)


@pytest.mark.parametrize("env", ENVS, ids=lambda e: e["id"])
def test_buffer_formulas_match_the_buffers_byte_for_byte(env: dict[str, Any]) -> None:
    info = _info(env)
    shape = EnvShape.from_info(info)
    # Beside the data, the replay and episode buffers keep two int64 indices per env copy.
    indices = 2 * 8 * info.num_envs
    for with_state in (False, True):
        replay = ReplayBuffer(info, 1000, with_state=with_state)
        estimate = replay_row_bytes(shape, with_state=with_state) * 1000
        assert _array_bytes(replay) == estimate + indices
    episodes = EpisodeBuffer(info, 200)
    assert _array_bytes(episodes) == episode_bytes(shape) * (200 + info.num_envs) + indices
    for hidden in (None, 16):
        rollout = RolloutBuffer(info, 100, hidden)
        assert _array_bytes(rollout) == rollout_bytes(shape, 100, info.num_envs, hidden)


VARIANTS: list[dict[str, Any]] = [
    {},
    {"share_parameters": False},
    {"recurrent": True},
    {"centralised_critic": False},
    {"central_mixer_layers": 3, "central_mixer_value": True},
]


def _variants(algorithm: Algorithm) -> list[dict[str, Any]]:
    fields = entry(algorithm).config.model_fields
    return [v for v in VARIANTS if set(v) <= set(fields)]


@pytest.mark.parametrize(
    ("algorithm", "variant"),
    [(e.algorithm, v) for e in entries() for v in _variants(e.algorithm)],
    ids=str,
)
def test_parameter_counts_match_the_torch_learners(
    algorithm: Algorithm, variant: dict[str, Any]
) -> None:
    pytest.importorskip("torch")
    algo = entry(algorithm)
    suite = sorted(algo.suites)[0]
    # Hopper, or simple_tag (unequal teams; WQMIX: simple_spread, the one scenario it trains on).
    env_id = [i for i in env_ids(suite) if trains_on(algo, suite, i)][-1]
    env = {"suite": suite, "id": env_id}
    spec = spec_of(algorithm, env, hyperparameters={"hidden_sizes": [24, 16], **variant})
    info = _info(env, num_envs=1)
    assert_plan_counts_the_torch_learner(spec, info)


def assert_plan_counts_the_torch_learner(spec: ExperimentSpec, info: EnvInfo) -> None:
    """The memory plan's parameters are exactly the torch learner's (its state less optimiser,
    generators, counters and the value normaliser)."""
    learner = entry(spec.algorithm).learner_class(Backend.TORCH)(spec.config(), info, "cpu", 0)
    params = sum(
        v.size
        for k, v in learner.state().items()
        if not k.startswith(("optim/", "rng/", "counters/", "value_norm"))
    )
    allocation = plan(spec.config(), EnvShape.from_info(info), 1, copies_broadcast=False)
    assert allocation.live_params + allocation.target_params == params
