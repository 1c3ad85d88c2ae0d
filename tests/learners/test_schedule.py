"""A spec's ``schedule``: hyperparameters that change during a run (a PBT member's history), and
runs that continue another run's checkpoint with their own changes (``init.what: run``).

The property PBT's replay rests on: a run to step S, continued from its checkpoint with new
values, ends with the same weights, bit for bit, as one run whose schedule changes the values at
S."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from learners.admission.parse import parse_spec
from learners.admission.schedule import iteration_steps
from learners.admission.warm_fit import continue_fit_errors
from learners.checkpoint import read
from learners.enums import Algorithm, Backend
from learners.hooks import MemoryHooks
from learners.registry import built_pairs, entry
from learners.spec import ExperimentSpec, SpecError
from learners.training import train

TORCH = [a for a, b in built_pairs() if b == Backend.TORCH]


def _perturbed(value: Any) -> Any:
    return 0.5 if value is None else value * 0.5


@pytest.mark.parametrize("algorithm", TORCH)
def test_mutable_hyperparameters_shape_no_tensor(
    algorithm: Algorithm, make_spec: Callable[..., ExperimentSpec]
) -> None:
    """A learner built with every mutable field changed holds tensors of the same names, shapes
    and dtypes as one built with the defaults: a learner's state moves between the two."""
    spec = make_spec(algorithm)
    config = spec.config()
    mutable = config.mutable_fields
    assert mutable, f"{algorithm} declares no mutable hyperparameters"
    network = set(config.network_fields) | set(config.policy_fields)
    assert not network & set(mutable), "a network field cannot change mid-run"
    changed = config.model_validate(
        {**config.model_dump(), **{n: _perturbed(getattr(config, n)) for n in mutable}}
    )
    info = _env_info(spec)
    cls = entry(algorithm).learner_class(Backend.TORCH)
    before = cls(config, info, "cpu", 0).state()
    after = cls(changed, info, "cpu", 0)
    assert {n: (t.shape, t.dtype) for n, t in before.items()} == {
        n: (t.shape, t.dtype) for n, t in after.state().items()
    }
    after.load_state(before)


def _env_info(spec: ExperimentSpec) -> Any:
    from learners.envs.factory import make_vec_env

    env = make_vec_env(spec.env, 0, workers=0)
    try:
        return env.info
    finally:
        env.close()


def _tensors_equal(a: Path, b: Path) -> None:
    left, _ = read(a)
    right, _ = read(b)
    assert set(left) == set(right)
    for name, value in left.items():
        np.testing.assert_array_equal(right[name], value, err_msg=name)


MAPPO_CASE = (
    Algorithm.MAPPO,
    {
        "hyperparameters": {
            "hidden_sizes": [32, 32],
            "rollout_length": 100,
            "linear_lr_decay": False,
        }
    },
    {"learning_rate": 2e-3, "entropy_coef": 0.05, "clip_eps": 0.1},
)
SCHEDULE_CASES = [
    # MAPPO: 2 copies x 100-step rollouts, 25-step episodes: a rollout ends every copy's episode.
    # Its step size decays over total_steps unless told not to: a run of 400 steps and one of
    # 800 would differ before 400 (a PBT search refuses the decay for that reason). Every
    # backend: each rebuilds its learner at the change.
    *(pytest.param(*MAPPO_CASE, b, id=f"mappo-{b}") for b in Backend),
    # MADDPG: 25-step episodes on 2 copies: step 400 ends every copy's 8th episode.
    pytest.param(
        Algorithm.MADDPG,
        {},
        {"learning_rate_actor": 3e-3, "tau": 0.05, "exploration_noise": 0.3},
        Backend.TORCH,
        id="maddpg-torch",
    ),
]


@pytest.mark.parametrize(("algorithm", "overrides", "change", "backend"), SCHEDULE_CASES)
def test_a_continued_run_equals_one_run_with_the_schedule(
    algorithm: Algorithm,
    backend: Backend,
    overrides: dict[str, Any],
    change: dict[str, Any],
    make_spec: Callable[..., ExperimentSpec],
    tmp_path: Path,
) -> None:
    """Train to step 400; continue that checkpoint to 800 with new values from 400 on; the
    result is bit for bit what one run to 800 with the schedule's change at 400 trains. And the
    change does something: without it, the weights at 800 differ."""
    checkpoints = {"every_steps": 400}
    first = make_spec(algorithm, backend, total_steps=400, checkpoint=checkpoints, **overrides)
    assert 400 % iteration_steps(first) == 0
    schedule = [{"at_step": 400, "hyperparameters": change}]
    whole = make_spec(
        algorithm, backend, total_steps=800, checkpoint=checkpoints, schedule=schedule, **overrides
    )
    plain = make_spec(algorithm, backend, total_steps=800, checkpoint=checkpoints, **overrides)
    runs = {}
    for name in ("first", "continued", "whole", "plain"):
        (tmp_path / name).mkdir()
        runs[name] = MemoryHooks(tmp_path / name)
    train(first, runs["first"])
    start = runs["first"].checkpoints[-1][1]
    train(whole, runs["continued"], resume_from=start)
    train(whole, runs["whole"])
    train(plain, runs["plain"])

    assert [s for s, _ in runs["continued"].checkpoints] == [800]
    # Up to the change, the scheduled run is the first run: the same checkpoint at 400.
    _tensors_equal(start, runs["whole"].checkpoints[0][1])
    _tensors_equal(runs["whole"].checkpoints[-1][1], runs["continued"].checkpoints[-1][1])
    with pytest.raises(AssertionError):
        _tensors_equal(runs["whole"].checkpoints[-1][1], runs["plain"].checkpoints[-1][1])
    assert any("schedule: from step 400" in m for _, m in runs["whole"].logs)


def test_a_schedule_is_refused_field_by_field(make_spec: Callable[..., ExperimentSpec]) -> None:
    base = make_spec(Algorithm.MAPPO, total_steps=2000).model_dump(mode="json")
    every = iteration_steps(make_spec(Algorithm.MAPPO))
    bad = [
        {"at_step": every, "hyperparameters": {"hidden_sizes": [8], "learning_rate": 1e-3}},
        {"at_step": every, "hyperparameters": {"learning_rate": -1.0}},
        {"at_step": every + 1, "hyperparameters": {"entropy_coef": 0.1}},
        {"at_step": 2000, "hyperparameters": {"no_such_thing": 1}},
    ]
    with pytest.raises(SpecError) as refused:
        parse_spec({**base, "schedule": bad})
    reasons = {e.field: e.reason for e in refused.value.errors}
    assert (
        "cannot change during a run of mappo" in reasons["schedule.0.hyperparameters.hidden_sizes"]
    )
    assert "learning_rate" in reasons["schedule.0.hyperparameters.hidden_sizes"]
    assert "schedule.1.hyperparameters.learning_rate" in reasons
    assert "must increase" in reasons["schedule.1.at_step"]
    assert f"multiple of {every:,}" in reasons["schedule.2.at_step"]
    assert "below total_steps" in reasons["schedule.3.at_step"]
    assert "is not a hyperparameter" in reasons["schedule.3.hyperparameters.no_such_thing"]
    good = [{"at_step": every, "hyperparameters": {"learning_rate": 1e-3}}]
    spec = parse_spec({**base, "schedule": good})
    assert spec.config_at(every - 1).learning_rate == base["hyperparameters"]["learning_rate"]  # type: ignore[attr-defined]
    assert spec.config_at(every).learning_rate == 1e-3  # type: ignore[attr-defined]


def test_a_continuation_must_describe_the_run_it_continues(
    make_spec: Callable[..., ExperimentSpec],
) -> None:
    parent = make_spec(
        Algorithm.MADDPG,
        total_steps=800,
        schedule=[{"at_step": 200, "hyperparameters": {"tau": 0.02}}],
    )
    init = {"experiment_id": "0" * 26, "checkpoint_id": "0" * 26, "what": "run"}
    same = parent.model_dump(mode="json")
    ok = make_spec(
        Algorithm.MADDPG,
        total_steps=1200,
        init=init,
        schedule=[*same["schedule"], {"at_step": 800, "hyperparameters": {"tau": 0.5}}],
    )
    assert continue_fit_errors(parent, ok, 800) == []
    wrong = make_spec(
        Algorithm.MADDPG,
        total_steps=800,
        seed=4,
        init=init,
        hyperparameters={**same["hyperparameters"], "gamma": 0.5},
    )
    fields = {e.field for e in continue_fit_errors(parent, wrong, 800)}
    assert fields == {"seed", "hyperparameters", "schedule", "total_steps"}
