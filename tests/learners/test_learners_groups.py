"""Networks per group: the agents of each group of a team share networks of their own (the speaker
and the listener of simple_speaker_listener each get an actor and a critic), in every backend
under the same checkpoint names; ``share_across_groups`` keeps one set for the whole team; a
checkpoint written before the field existed reads as the one set it holds; the memory estimate
counts what the learners build."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from learners import checkpoint
from learners.admission.envs import trains_on
from learners.admission.warm_fit import init_fit_errors
from learners.checkpoint import Manifest, read_manifest, write
from learners.enums import Algorithm, Backend, EnvSuite
from learners.envs.base import EnvInfo
from learners.envs.factory import make_vec_env
from learners.envs.teams import sharing_sets
from learners.policy import load_policy
from learners.registry import entry
from learners.spec import EnvSpec, ExperimentSpec
from tests.learners.test_budget import assert_plan_counts_the_torch_learner, spec_of
from tests.learners.test_learners_checkpoint import manifest_for

SPEAKER_LISTENER = {
    "suite": "mpe",
    "id": "simple_speaker_listener_v4",
    "kwargs": {"continuous_actions": False},
}
GROUPED = (Algorithm.IPPO, Algorithm.MAPPO, Algorithm.MADDPG, Algorithm.WQMIX)


@functools.cache
def _info() -> EnvInfo:
    vec = make_vec_env(EnvSpec.model_validate(SPEAKER_LISTENER), 0, num_envs=2, workers=0)
    vec.close()
    assert vec.info.groups == ("speaker", "listener") and vec.info.teams == ("agent", "agent")
    return vec.info


def _spec(algorithm: Algorithm, backend: Backend = Backend.TORCH, **given: Any) -> ExperimentSpec:
    return spec_of(
        algorithm,
        SPEAKER_LISTENER,
        backend,
        hyperparameters={"hidden_sizes": [16, 8], **given},
    )


def _shapes(algorithm: Algorithm, backend: Backend, **given: Any) -> dict[str, tuple[int, ...]]:
    spec = _spec(algorithm, backend, **given)
    learner = entry(algorithm).learner_class(backend)(spec.config(), _info(), "cpu", 0)
    return {
        name: tuple(np.shape(value))
        for name, value in learner.state().items()
        if not name.startswith(("optim/", "rng/", "counters/"))
    }


def test_sharing_sets_split_a_team_by_group_only_where_it_has_several() -> None:
    teams = ("adversary", "adversary", "adversary", "agent", "agent")
    groups = ("leadadversary", "adversary", "adversary", "agent", "agent")
    assert sharing_sets(teams, groups, across_groups=False) == (
        "adversary/leadadversary",
        "adversary/adversary",
        "adversary/adversary",
        "agent",
        "agent",
    )
    assert sharing_sets(teams, groups, across_groups=True) == teams
    assert sharing_sets(teams, (), across_groups=False) == teams  # no groups recorded
    # One group per team: the teams themselves, whichever the setting.
    assert sharing_sets(("a", "b"), ("a", "b"), across_groups=False) == ("a", "b")


@pytest.mark.parametrize("algorithm", GROUPED)
def test_each_group_has_its_own_networks_and_across_groups_one(algorithm: Algorithm) -> None:
    per_group = _shapes(algorithm, Backend.TORCH)
    across = _shapes(algorithm, Backend.TORCH, share_across_groups=True)
    first = {
        Algorithm.MADDPG: ("actor.teams.0.layers.0.weight", "actor.teams.1.layers.0.weight"),
        Algorithm.WQMIX: ("agent.layers.0.weight",),
    }.get(algorithm, ("actor.layers.0.weight",))
    obs = _info().obs_dim
    if algorithm == Algorithm.MADDPG:
        # One actor per group, each with a one-hot of one place (each group has one agent).
        assert per_group[first[0]] == per_group[first[1]] == (16, obs + 1)
        assert "actor.layers.0.weight" not in per_group
        assert across["actor.layers.0.weight"] == (16, obs + 2)
        assert not any(name.startswith("actor.teams.") for name in across)
    else:
        # (groups, out, in): a set of weights per group, the place within the group appended.
        assert per_group[first[0]] == (2, 16, obs + 1)
        assert across[first[0]] == (16, obs + 2)


@pytest.mark.parametrize("algorithm", GROUPED)
@pytest.mark.parametrize("backend", [Backend.TENSORFLOW, Backend.MINDSPORE])
def test_every_backend_lays_groups_out_under_the_same_names(
    algorithm: Algorithm, backend: Backend
) -> None:
    assert _shapes(algorithm, backend) == _shapes(algorithm, Backend.TORCH)


@pytest.mark.parametrize("algorithm", GROUPED)
@pytest.mark.parametrize("across", [False, True])
def test_the_memory_estimate_counts_the_group_networks(algorithm: Algorithm, across: bool) -> None:
    assert_plan_counts_the_torch_learner(_spec(algorithm, share_across_groups=across), _info())


def test_a_spec_defaults_to_networks_per_group() -> None:
    for algorithm in GROUPED:
        assert _spec(algorithm).hyperparameters["share_across_groups"] is False
    pendulum = spec_of(Algorithm.DDPG, {"suite": "gymnasium", "id": "Pendulum-v1"})
    assert "share_across_groups" not in pendulum.hyperparameters  # one agent: no groups


def test_a_checkpoint_from_before_groups_had_networks_loads_as_one_set(
    tmp_path: Path, make_spec: Callable[..., ExperimentSpec]
) -> None:
    """A manifest whose spec does not name ``share_across_groups`` was written when a team's
    groups shared one set: it reads as ``true``, and its policy loads and acts as it was
    trained."""
    spec = make_spec(Algorithm.MAPPO, env=SPEAKER_LISTENER)
    old = spec.model_copy(
        update={"hyperparameters": {**spec.hyperparameters, "share_across_groups": True}}
    )
    env = make_vec_env(old.env, old.seed)
    learner = entry(Algorithm.MAPPO).learner_class(Backend.TORCH)(
        old.config(), env.info, "cpu", old.seed
    )
    manifest = manifest_for(old, checkpoint.env_info_to_json(env.info)).model_dump(mode="json")
    del manifest["spec"]["hyperparameters"]["share_across_groups"]
    path = tmp_path / "old.safetensors"
    write(path, learner.state(), Manifest.model_validate(manifest))
    stored: Any = read_manifest(path).spec["hyperparameters"]
    assert stored["share_across_groups"] is True
    observation = env.reset()
    np.testing.assert_array_equal(
        load_policy(path).act(observation), learner.act(observation, explore=False)
    )
    env.close()
    # A fresh run cannot warm-start its per-group networks from the one set it holds.
    parent = ExperimentSpec.model_validate(read_manifest(path).spec)
    given = {**spec.model_dump(mode="json"), "init": {"experiment_id": "E" * 26}}
    child = ExperimentSpec.model_validate(given)
    [error] = init_fit_errors(parent, child)
    assert error.field == "hyperparameters.share_across_groups"
    assert "must be true" in error.reason


def test_the_grouped_scenarios_train_with_every_algorithm_that_takes_them() -> None:
    """The catalogue refuses none of the grouped algorithms on simple_speaker_listener."""
    for algorithm in GROUPED:
        assert trains_on(entry(algorithm), EnvSuite.MPE, "simple_speaker_listener_v4")
