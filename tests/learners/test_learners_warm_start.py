"""Warm starts (``spec.init``) in the library: what a run takes from another run's checkpoint
(``learners.warm_start``), for every algorithm, from one backend into another; that ``train``
starts from it; the exact checks that refuse a checkpoint that does not fit; and that the
hyperparameters the submission check compares (``policy_fields``, ``network_fields``) are all
that shape the networks."""

from __future__ import annotations

import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from learners import checkpoint
from learners.admission.parse import parse_spec
from learners.checkpoint import read
from learners.enums import Algorithm, Backend
from learners.envs.base import EnvInfo
from learners.envs.factory import make_vec_env
from learners.hooks import MemoryHooks
from learners.learner import Learner
from learners.registry import entry
from learners.spec import ExperimentSpec
from learners.training import train
from learners.warm_start import OWN_PREFIXES, WarmStartError, warm_start
from tests.learners.conftest import small_hyperparameters, smoke_env

PARENT_ID = "01JDZ0000000000000000000PA"
CHECKPOINT_ID = "01JDZ0000000000000000000CK"
ALGORITHMS = [Algorithm.MAPPO, Algorithm.IPPO, Algorithm.MADDPG, Algorithm.WQMIX, Algorithm.DDPG]


def _init(what: str) -> dict[str, Any]:
    return {"experiment_id": PARENT_ID, "checkpoint_id": CHECKPOINT_ID, "what": what}


@pytest.fixture(scope="module")
def parents(tmp_path_factory: pytest.TempPathFactory) -> dict[Algorithm, Path]:
    """A checkpoint of a short PyTorch run of each algorithm (updates made: Adam has moments)."""
    made = {}
    for algorithm in ALGORITHMS:
        spec = ExperimentSpec.model_validate(_spec_data(algorithm, Backend.TORCH, 400))
        hooks = MemoryHooks(checkpoint_dir=tmp_path_factory.mktemp(str(algorithm)))
        train(spec, hooks)
        path = hooks.checkpoints[-1][1]
        assert path is not None
        made[algorithm] = path
    return made


def _spec_data(algorithm: Algorithm, backend: Backend, total_steps: int, **extra: Any) -> Any:
    """A small spec's JSON (``tests.learners.conftest``'s), with ``extra`` top-level fields."""
    hyperparameters = small_hyperparameters(algorithm)
    if algorithm in (Algorithm.MAPPO, Algorithm.IPPO):
        hyperparameters["rollout_length"] = 50
    data = {
        "name": "warm",
        "algorithm": algorithm,
        "backend": backend,
        "env": smoke_env(algorithm),
        "total_steps": total_steps,
        "seed": 5,
        "device": "cpu",
        "hyperparameters": hyperparameters,
        "evaluation": {"every_steps": 200, "episodes": 2},
        "checkpoint": {"every_steps": 200, "keep_last": 3},
        **extra,
    }
    return parse_spec(data).model_dump(mode="json")


def _fresh(spec: ExperimentSpec) -> tuple[Learner, EnvInfo]:
    env = make_vec_env(spec.env, spec.seed)
    info = env.info
    env.close()
    learner = entry(spec.algorithm).learner_class(spec.backend)(
        spec.config(), info, "cpu", spec.seed
    )
    return learner, info


def _equal(a: Any, b: Any) -> bool:
    return bool(np.array_equal(np.asarray(a), np.asarray(b)))


CASES = [pytest.param(a, Backend.TORCH, id=f"{a}-torch") for a in ALGORITHMS] + [
    pytest.param(Algorithm.MAPPO, Backend.TENSORFLOW, id="mappo-tensorflow"),
    pytest.param(Algorithm.DDPG, Backend.MINDSPORE, id="ddpg-mindspore"),
]


@pytest.mark.parametrize(("algorithm", "backend"), CASES)
def test_policy_takes_the_acting_network_and_its_target_and_nothing_else(
    algorithm: Algorithm, backend: Backend, parents: dict[Algorithm, Path]
) -> None:
    parent, _ = read(parents[algorithm])
    spec = ExperimentSpec.model_validate(_spec_data(algorithm, backend, 400, init=_init("policy")))
    learner, info = _fresh(spec)
    fresh = learner.state()
    warm_start(learner, parents[algorithm], spec, info)
    state = learner.state()
    policy = set(learner.policy_tensor_names())
    assert policy and all(_equal(state[n], parent[n]) for n in policy)
    assert not any(_equal(fresh[n], parent[n]) for n in policy), "the fresh policy differs"
    for name, tensor in state.items():
        base = name.removeprefix("target_")
        if name.startswith("target_") and base in policy:
            assert _equal(tensor, parent[base]), f"{name} starts at the policy it tracks"
        elif name not in policy:
            assert _equal(tensor, fresh[name]), f"{name} starts as a fresh run's"
    assert not any(n.startswith("optim/") for n in state if n not in fresh)


@pytest.mark.parametrize(("algorithm", "backend"), CASES)
def test_all_takes_every_network_and_optimiser_but_keeps_its_own_generators(
    algorithm: Algorithm, backend: Backend, parents: dict[Algorithm, Path]
) -> None:
    parent, _ = read(parents[algorithm])
    spec = ExperimentSpec.model_validate(_spec_data(algorithm, backend, 400, init=_init("all")))
    learner, info = _fresh(spec)
    fresh = learner.state()
    warm_start(learner, parents[algorithm], spec, info)
    state = learner.state()
    moments = [n for n in parent if n.startswith("optim/")]
    assert moments, "the parent trained: its Adams have moments"
    for name, tensor in state.items():
        if name.startswith(OWN_PREFIXES):
            assert _equal(tensor, fresh[name]), f"{name} is the run's own"
        else:
            assert _equal(tensor, parent[name]), f"{name} comes from the checkpoint"
    assert set(moments) <= set(state)


def test_train_starts_from_the_checkpoint(parents: dict[Algorithm, Path], tmp_path: Path) -> None:
    """DDPG stepping fewer steps than its learning_starts makes no update: its last checkpoint
    holds the actor it started with, the parent's, in its target too."""
    parent, manifest = read(parents[Algorithm.DDPG])
    data = _spec_data(Algorithm.DDPG, Backend.TORCH, 60, init=_init("policy"))
    spec = ExperimentSpec.model_validate(data)
    hooks = MemoryHooks(checkpoint_dir=tmp_path)
    train(spec, hooks, init_from=parents[Algorithm.DDPG])
    final, _ = read(hooks.checkpoints[-1][1])  # type: ignore[arg-type]
    actor = [n for n in parent if n.startswith("actor.")]
    assert actor and all(_equal(final[n], parent[n]) for n in actor)
    assert all(_equal(final[f"target_{n}"], parent[n]) for n in actor)
    assert not _equal(final["critic.layers.0.weight"], parent["critic.layers.0.weight"])
    assert any(
        f"checkpoint {CHECKPOINT_ID} (step {manifest.step:,}, torch)" in message
        for _, message in hooks.logs
    )
    assert hooks.checkpoints[0][0] <= 60, "its own step axis, from 0"


def test_a_resumed_run_continues_its_own_checkpoint_not_the_parents(
    parents: dict[Algorithm, Path], tmp_path: Path
) -> None:
    own_spec = ExperimentSpec.model_validate(_spec_data(Algorithm.DDPG, Backend.TORCH, 200))
    own_hooks = MemoryHooks(checkpoint_dir=tmp_path / "own")
    (tmp_path / "own").mkdir()
    train(own_spec, own_hooks)
    own, _ = read(own_hooks.checkpoints[-1][1])  # type: ignore[arg-type]
    data = _spec_data(Algorithm.DDPG, Backend.TORCH, 400, init=_init("policy"))
    hooks = MemoryHooks(checkpoint_dir=tmp_path, stop_after=1)
    train(
        ExperimentSpec.model_validate(data),
        hooks,
        resume_from=own_hooks.checkpoints[-1][1],
        init_from=parents[Algorithm.DDPG],
    )
    assert not any("warm start" in message for _, message in hooks.logs)
    assert any("resuming from the checkpoint at step" in message for _, message in hooks.logs)
    del own


def test_a_checkpoint_that_does_not_fit_is_refused_by_name(
    parents: dict[Algorithm, Path], tmp_path: Path
) -> None:
    tensors, manifest = read(parents[Algorithm.MAPPO])

    ippo = ExperimentSpec.model_validate(
        _spec_data(Algorithm.IPPO, Backend.TORCH, 400, init=_init("policy"))
    )
    learner, info = _fresh(ippo)
    with pytest.raises(WarmStartError, match="holds a mappo run, not ippo"):
        warm_start(learner, parents[Algorithm.MAPPO], ippo, info)

    data = _spec_data(Algorithm.MAPPO, Backend.TORCH, 400, init=_init("policy"))
    data["env"]["kwargs"]["N"] = 4
    four = ExperimentSpec.model_validate(data)
    learner, info = _fresh(four)
    with pytest.raises(WarmStartError, match="other spaces: its num_agents is 3, this run's 4"):
        warm_start(learner, parents[Algorithm.MAPPO], four, info)

    data = _spec_data(Algorithm.MAPPO, Backend.TORCH, 400, init=_init("policy"))
    data["hyperparameters"]["hidden_sizes"] = [16, 16]
    narrow = ExperimentSpec.model_validate(data)
    learner, info = _fresh(narrow)
    with pytest.raises(
        WarmStartError, match=r"actor\.\S+ is \(.*32.*\) in the checkpoint, \(.*16.*\) in this run"
    ):
        warm_start(learner, parents[Algorithm.MAPPO], narrow, info)

    export = tmp_path / "policy.safetensors"
    checkpoint.write(
        export,
        {n: t for n, t in tensors.items() if n.startswith("actor.")},
        manifest.model_copy(update={"contents": "policy"}),
    )
    spec = ExperimentSpec.model_validate(
        _spec_data(Algorithm.MAPPO, Backend.TORCH, 400, init=_init("policy"))
    )
    learner, info = _fresh(spec)
    with pytest.raises(WarmStartError, match="policy-only export"):
        warm_start(learner, export, spec, info)


# -- the fields the submission check compares ---------------------------------------------------


def _other_value(annotation: Any, value: Any) -> list[Any]:
    """Values to try instead of ``value`` for a field of ``annotation``."""
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value + 1, value * 2, max(value - 1, 0)]
    if isinstance(value, float):
        return [value * 0.5, value * 1.5 if value else 0.5]
    if value is None:
        return [0.5, 1]
    if isinstance(value, str):
        options = [a for a in typing.get_args(annotation) if isinstance(a, str)]
        return [o for o in options if o != value]
    if isinstance(value, tuple):
        return [tuple(v + 1 for v in value)]
    return []


def _shapes(learner: Learner, names: Callable[[Learner], list[str]]) -> dict[str, tuple[int, ...]]:
    state = learner.state()
    return {n: tuple(state[n].shape) for n in names(learner) if not n.startswith("optim/")}


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_no_field_but_the_declared_ones_changes_a_networks_shape(algorithm: Algorithm) -> None:
    spec = ExperimentSpec.model_validate(_spec_data(algorithm, Backend.TORCH, 400))
    config_class = entry(algorithm).config
    assert set(config_class.policy_fields) <= set(config_class.network_fields)
    assert set(config_class.network_fields) <= set(config_class.model_fields)
    env = make_vec_env(spec.env, spec.seed)
    info = env.info
    env.close()

    def build(config: Any) -> Learner:
        return entry(algorithm).learner_class(Backend.TORCH)(config, info, "cpu", 0)

    def every(learner: Learner) -> list[str]:
        return list(learner.state())

    def policy(learner: Learner) -> list[str]:
        return learner.policy_tensor_names()

    base = spec.config()
    expected_all, expected_policy = _shapes(build(base), every), _shapes(build(base), policy)
    tried = 0
    for name, field in config_class.model_fields.items():
        for other in _other_value(field.annotation, getattr(base, name)):
            try:
                config = config_class.model_validate({**base.model_dump(), name: other})
            except ValueError:
                continue
            learner = build(config)
            if name not in config_class.policy_fields:
                assert _shapes(learner, policy) == expected_policy, f"{name} shapes the policy"
            if name not in config_class.network_fields:
                assert _shapes(learner, every) == expected_all, f"{name} shapes a network"
            tried += 1
            break
    assert tried >= len(config_class.model_fields) - 3


# -- the submission check (no network built) ----------------------------------------------------


def test_the_submission_check_names_each_misfit() -> None:
    from learners.admission.warm_fit import init_fit_errors

    def spec(what: str = "policy", **changes: Any) -> ExperimentSpec:
        data = _spec_data(Algorithm.MAPPO, Backend.TORCH, 400, init=_init(what))
        for path, value in changes.items():
            node = data
            *parents, leaf = path.split("__")
            for part in parents:
                node = node[part]
            node[leaf] = value
        return parse_spec(data)

    parent = spec()
    assert init_fit_errors(parent, spec(backend="mindspore", seed=9)) == []
    assert init_fit_errors(parent, spec(env__kwargs__max_cycles=50, env__num_envs=4)) == []
    fields = {e.field: e.reason for e in init_fit_errors(parent, spec(env__kwargs__N=4))}
    assert list(fields) == ["env.kwargs"]
    assert "agents 3 there, 4 here" in fields["env.kwargs"]
    assert "observation sizes (18, 18, 18) there, (24, 24, 24, 24) here" in fields["env.kwargs"]
    critic_only = {"hyperparameters__agent_specific_state": True}
    assert init_fit_errors(parent, spec(**critic_only)) == []
    assert [e.field for e in init_fit_errors(parent, spec("all", **critic_only))] == [
        "hyperparameters.agent_specific_state"
    ]
    wider = spec(hyperparameters__hidden_sizes=[64, 64], hyperparameters__recurrent=True)
    assert [e.field for e in init_fit_errors(parent, wider)] == [
        "hyperparameters.hidden_sizes",
        "hyperparameters.recurrent",
    ]
    ippo = _spec_data(Algorithm.IPPO, Backend.TORCH, 400, init=_init("policy"))
    assert [e.field for e in init_fit_errors(parent, parse_spec(ippo))] == ["algorithm"]
    push = spec(env__id="simple_push_v3")
    assert [e.field for e in init_fit_errors(parent, push)] == ["env.id"]
