"""``env.engine`` picks what steps an mpe scenario: the spec accepts it for mpe only,
``make_vec_env`` builds the vector engine's ``VecEnv`` for it (mpe2 where a replay renders), and a
short MAPPO run trains and evaluates on it exactly as on mpe2."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from learners.admission.parse import parse_spec
from learners.enums import EnvEngine
from learners.envs.factory import make_vec_env
from learners.envs.mpe import MPEVecEnv
from learners.envs.vector.adapter import VectorVecEnv
from learners.hooks import MemoryHooks
from learners.spec import ExperimentSpec, SpecError


def spec_for(env: dict[str, Any], algorithm: str = "mappo", **changes: Any) -> ExperimentSpec:
    data = {
        "name": "engine-test",
        "algorithm": algorithm,
        "backend": "torch",
        "env": env,
        "total_steps": 300,
        "seed": 5,
        "device": "cpu",
        "hyperparameters": {"hidden_sizes": [32, 32], "rollout_length": 25, "epochs": 2},
        "evaluation": {"every_steps": 150, "episodes": 2},
        "checkpoint": {"every_steps": 300},
        **changes,
    }
    return parse_spec(data)


SPREAD = {"suite": "mpe", "id": "simple_spread_v3", "num_envs": 2}


def test_an_mpe_spec_steps_on_the_vector_engine_unless_it_asks_for_mpe2() -> None:
    assert spec_for(SPREAD).env.engine == EnvEngine.VECTOR
    assert spec_for({**SPREAD, "engine": "mpe2"}).env.engine == EnvEngine.MPE2
    # A Gymnasium spec has no engine to choose: it keeps the field's plain default.
    pendulum = {"suite": "gymnasium", "id": "Pendulum-v1"}
    assert spec_for(pendulum, algorithm="ddpg", hyperparameters={}).env.engine == EnvEngine.MPE2


def test_a_stored_spec_keeps_the_engine_it_was_stored_with() -> None:
    # Specs stored before the vector engine was the default hold "mpe2": read back, they stay.
    stored = spec_for({**SPREAD, "engine": "mpe2"}).model_dump(mode="json")
    assert ExperimentSpec.model_validate(stored).env.engine == EnvEngine.MPE2


def test_the_vector_engine_takes_up_to_4096_copies_the_others_256() -> None:
    assert spec_for({**SPREAD, "num_envs": 4096}).env.num_envs == 4096
    with pytest.raises(SpecError) as refusal:
        spec_for({**SPREAD, "num_envs": 4097})
    assert [e.field for e in refusal.value.errors] == ["env.num_envs"]


def test_gymnasium_refuses_the_vector_engine() -> None:
    env = {"suite": "gymnasium", "id": "Pendulum-v1", "engine": "vector"}
    with pytest.raises(SpecError) as refusal:
        spec_for(env, algorithm="ddpg", hyperparameters={})
    assert [e.field for e in refusal.value.errors] == ["env.engine"]
    assert spec_for({**env, "engine": "mpe2"}, algorithm="ddpg", hyperparameters={})


def test_make_vec_env_picks_the_engine() -> None:
    spec = spec_for({**SPREAD, "engine": "vector"})
    env = make_vec_env(spec.env, 1, num_envs=4)
    assert isinstance(env, VectorVecEnv), "in process: it steps every copy at once"
    # Replays render on mpe2.
    rendering = make_vec_env(spec.env, 1, num_envs=1, render=True)
    assert isinstance(rendering, MPEVecEnv)
    rendering.close()
    mpe2 = spec_for({**SPREAD, "engine": "mpe2"}).env
    assert isinstance(make_vec_env(mpe2, 1, num_envs=2, workers=0), MPEVecEnv)


def test_mappo_trains_and_evaluates_on_the_vector_engine_as_on_mpe2() -> None:
    """The engines are equal, so a short run learns and evaluates the same numbers on both."""
    pytest.importorskip("torch")
    from learners.training import train

    runs = {}
    for engine in ("vector", "mpe2"):
        hooks = MemoryHooks()
        train(spec_for({**SPREAD, "engine": engine}), hooks)
        runs[engine] = hooks
    for series in ("train/episode_return", "eval/episode_return"):
        vector, mpe2 = runs["vector"].series(series), runs["mpe2"].series(series)
        assert vector, f"no {series}"
        assert [step for step, _ in vector] == [step for step, _ in mpe2]
        np.testing.assert_allclose([v for _, v in vector], [v for _, v in mpe2], atol=1e-4)
