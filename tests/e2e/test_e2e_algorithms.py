"""Every (algorithm, backend) pair the registry has built, through the deployed shape: a spec is
POSTed to ``marlforge api``, one ``marlforge worker`` serving every backend's queue trains it on
PostgreSQL and Redis, and the final checkpoint is downloaded, checked against its SHA-256 and
loaded for acting by every installed backend its manifest names; they must all act alike.

The cases come from ``learners.registry``: a pair added there, or a new value of a field that
changes what a checkpoint holds (``VARIANT_FIELDS``), is covered without new test code. Every pair
trains its defaults; each other variant trains once, its writer rotating through the algorithm's
backends, and is loaded by all of them. (That every backend builds each variant's networks alike,
weight for weight, is the parity suite's job, tests/learners/backends/test_parity_*.py; a variant
written by every backend here cost 14 more runs through the stack, about four minutes of CI.)
"""

from __future__ import annotations

import hashlib
import importlib.util
import types
import typing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from e2e_support import RAN_TO_SUCCESS, Stack
from numpy.typing import NDArray

from learners.config import AlgorithmConfig
from learners.enums import ActionKind, Algorithm, Backend, Device, EnvSuite
from learners.registry import built_pairs, entry

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.integration]

TOTAL_STEPS = 200
# Every case trains on the environment of its kind that the algorithm's defaults are tuned for.
MULTI_AGENT_ENV = (EnvSuite.MPE, "simple_spread_v3")
SINGLE_AGENT_ENV = (EnvSuite.GYMNASIUM, "Pendulum-v1")
# Fields whose values change the networks or the loss: each non-default value is a case of its own.
VARIANT_FIELDS = ("weighting", "recurrent", "central_mixer_value")
# Small enough to train in seconds; applied to the configs that have the field.
TINY_HYPERPARAMETERS: dict[str, Any] = {
    "hidden_sizes": [16, 16],
    "learning_starts": 50,
    "batch_size": 16,
    "buffer_size": 1000,
    "rollout_length": 25,
    "epochs": 2,
    "chunk_length": 10,
    "rnn_hidden_size": 16,
    "episode_batch_size": 4,
    "episode_buffer_size": 20,
    "mixing_embed_dim": 8,
    "hypernet_hidden": 16,
    "central_mixer_hidden": 32,
    "epsilon_decay_steps": 100,
    "target_update_interval": 5,
}
# Steps on which every backend's policy must agree (a recurrent one carries its state across them).
ACT_STEPS = 5
# Float32 networks evaluated by different frameworks: summation orders differ in the last bits.
ACTION_ATOL = 1e-4
_DISCRETE_FIRST = [ActionKind.DISCRETE, ActionKind.CONTINUOUS]


@dataclass(frozen=True)
class Case:
    """One run: a built pair and the hyperparameters that make it a variant."""

    algorithm: Algorithm
    backend: Backend
    variant: dict[str, Any] = field(default_factory=dict)
    label: str = ""
    action_kind: ActionKind | None = None
    """MPE only: the action kind to train with (``None``: discrete where the algorithm can)."""

    @property
    def id(self) -> str:
        return "-".join(p for p in (self.algorithm.value, self.backend.value, self.label) if p)

    def spec(self) -> dict[str, Any]:
        algo = entry(self.algorithm)
        suite, env_id = MULTI_AGENT_ENV if algo.multi_agent else SINGLE_AGENT_ENV
        kwargs = {}
        if suite == EnvSuite.MPE:
            kind = self.action_kind or min(algo.action_kinds, key=_DISCRETE_FIRST.index)
            kwargs["continuous_actions"] = kind == ActionKind.CONTINUOUS
        fields = algo.config.model_fields
        tiny = {k: v for k, v in TINY_HYPERPARAMETERS.items() if k in fields}
        return {
            "name": f"e2e-{self.id}",
            "algorithm": self.algorithm.value,
            "backend": self.backend.value,
            "env": {"suite": suite.value, "id": env_id, "num_envs": 2, "kwargs": kwargs},
            "total_steps": TOTAL_STEPS,
            "seed": 5,
            "device": Device.CPU.value,
            "hyperparameters": {**tiny, **self.variant},
            "evaluation": {"every_steps": 100, "episodes": 1},
            "checkpoint": {"every_steps": 100, "keep_last": 2},
        }


def _choices(annotation: Any) -> tuple[Any, ...]:
    """The values a variant field can take: both booleans, or a ``Literal``'s values."""
    if annotation is bool:
        return (False, True)
    if typing.get_origin(annotation) is typing.Literal:
        return typing.get_args(annotation)
    raise TypeError(f"variant fields must be bool or Literal, not {annotation}")


def _variants(config: type[AlgorithmConfig]) -> list[tuple[dict[str, Any], str]]:
    """The defaults, then each other value of each variant field, with their labels."""
    base_labels: list[str] = []
    others: list[tuple[dict[str, Any], str]] = []
    for name in VARIANT_FIELDS:
        info = config.model_fields.get(name)
        if info is None:
            continue
        if info.annotation is not bool:
            base_labels.append(str(info.default))
        for value in _choices(info.annotation):
            if value != info.default:
                others.append(({name: value}, name if value is True else str(value)))
    return [({}, "-".join(base_labels)), *others]


def _cases() -> list[Case]:
    """Per built pair, the defaults; per algorithm, each other variant of ``_variants`` and, on
    MPE, each action kind other than the default (discrete) one (another policy head in the
    checkpoint), once each, written by the backends in turn."""
    cases: list[Case] = []
    pairs, turn = built_pairs(), 0
    for algorithm in dict.fromkeys(a for a, _ in pairs):
        algo = entry(algorithm)
        backends = [b for a, b in pairs if a == algorithm]
        (default, label), *others = _variants(algo.config)
        cases.extend(Case(algorithm, backend, default, label) for backend in backends)
        extra = [Case(algorithm, backends[0], v, lab) for v, lab in others]
        if algo.multi_agent:
            kinds = sorted(algo.action_kinds, key=_DISCRETE_FIRST.index)[1:]
            extra.extend(Case(algorithm, backends[0], {}, k.value, k) for k in kinds)
        for case in extra:
            cases.append(replace(case, backend=backends[turn % len(backends)]))
            turn += 1
    return cases


CASES = _cases()


def _installed(backend: Backend) -> bool:
    return importlib.util.find_spec(backend.value) is not None


def _assert_metrics(points: list[dict[str, Any]]) -> None:
    keys = [(p["step"], p["name"]) for p in points]
    assert [p["step"] for p in points] == sorted(p["step"] for p in points)
    assert len(keys) == len(set(keys))
    names = {p["name"] for p in points}
    assert any(n.startswith("learner/") for n in names), names
    evaluations = [p for p in points if p["name"] == "eval/episode_return"]
    assert [p["step"] for p in evaluations] == [100, TOTAL_STEPS]
    assert all(p["value"] is not None for p in evaluations)


def _download_final_checkpoint(stack: Stack, experiment_id: str, folder: Path) -> Path:
    checkpoints = stack.api.checkpoints(experiment_id)
    assert [c["step"] for c in checkpoints] == [100, TOTAL_STEPS]
    final = checkpoints[-1]
    response = stack.api.http.get(f"/v1/experiments/{experiment_id}/checkpoints/{final['id']}/file")
    assert response.status_code == 200, response.text
    assert hashlib.sha256(response.content).hexdigest() == final["sha256"]
    assert len(response.content) == final["size_bytes"]
    path = folder / "final.ckpt"
    path.write_bytes(response.content)
    return path


def _act_in_every_backend(path: Path) -> dict[Backend, list[NDArray[Any]]]:
    """Each installed backend's actions over ``ACT_STEPS`` steps of the env adapter, stepped with
    the actions of the backend that wrote the checkpoint."""
    from learners.checkpoint import read_manifest
    from learners.envs.factory import make_vec_env
    from learners.policy import load_policy
    from learners.spec import ExperimentSpec

    manifest = read_manifest(path)
    policies = {
        b: load_policy(path, b, Device.CPU) for b in manifest.policy_backends if _installed(b)
    }
    spec = ExperimentSpec.model_validate(manifest.spec)
    env = make_vec_env(spec.env, seed=11, workers=0)
    actions: dict[Backend, list[NDArray[Any]]] = {b: [] for b in policies}
    try:
        observation = env.reset(seed=11)
        for _ in range(ACT_STEPS):
            for backend, policy in policies.items():
                actions[backend].append(np.asarray(policy.act(observation)))
            observation, _ = env.step(actions[manifest.backend][-1])
    finally:
        env.close()
    return actions


def _assert_valid_actions(actions: NDArray[Any], info: types.SimpleNamespace) -> None:
    if info.action_kind == "continuous":
        assert actions.shape == (info.num_envs, info.num_agents, info.action_dim)
        assert np.all(np.isfinite(actions)) and np.all(np.abs(actions) <= 1.0)
    else:
        assert actions.shape == (info.num_envs, info.num_agents)
        assert np.all((actions >= 0) & (actions < info.action_dim))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_built_pair_trains_and_every_backend_acts_alike_on_its_checkpoint(
    full_stack: Stack, case: Case, tmp_path: Path
) -> None:
    from learners.checkpoint import read_manifest

    created = full_stack.api.submit(case.spec())
    done = full_stack.api.wait_until(created["id"], {"succeeded"}, timeout=600)

    assert full_stack.api.transitions(created["id"]) == RAN_TO_SUCCESS
    assert done["progress"] == {"step": TOTAL_STEPS, "total_steps": TOTAL_STEPS, "fraction": 1.0}
    for name, value in case.variant.items():
        assert done["spec"]["hyperparameters"][name] == value
    _assert_metrics(full_stack.api.all_metrics(created["id"]))
    path = _download_final_checkpoint(full_stack, created["id"], tmp_path)
    manifest = read_manifest(path)
    assert (manifest.algorithm, manifest.backend) == (case.algorithm, case.backend)
    assert manifest.step == TOTAL_STEPS and case.backend in manifest.policy_backends

    actions = _act_in_every_backend(path)

    assert set(actions) == {b for b in manifest.policy_backends if _installed(b)}
    info = types.SimpleNamespace(**manifest.env)
    reference = actions[case.backend]
    for step, expected in enumerate(reference):
        _assert_valid_actions(expected, info)
        for backend, taken in actions.items():
            message = f"{backend} vs {case.backend} at step {step}"
            if info.action_kind == "continuous":
                np.testing.assert_allclose(taken[step], expected, atol=ACTION_ATOL, err_msg=message)
            else:
                np.testing.assert_array_equal(taken[step], expected, err_msg=message)


def test_the_worker_caps_the_frameworks_threads_before_any_run(full_stack: Stack) -> None:
    output = full_stack.worker.output()

    # MARLFORGE_WORKER_THREADS is unset: the default of one thread per framework applies.
    assert "framework CPU threads (MARLFORGE_WORKER_THREADS=1)" in output
    for name in ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "MARLFORGE_CPU_THREADS"):
        assert f"{name}=1" in output


def test_the_cases_cover_every_built_pair_and_variant() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    defaults = {(c.algorithm, c.backend) for c in CASES if not c.variant and not c.action_kind}
    assert defaults == set(built_pairs())
    for algorithm in {a for a, _ in built_pairs()}:
        algo = entry(algorithm)
        mine = [c for c in CASES if c.algorithm == algorithm]
        if "recurrent" in algo.config.model_fields:
            assert sum(c.variant.get("recurrent") is True for c in mine) == 1
        if "weighting" in algo.config.model_fields:
            assert {c.label for c in mine} >= {"ow", "cw"}
        if algo.multi_agent and ActionKind.CONTINUOUS in algo.action_kinds:
            assert sum(c.action_kind == ActionKind.CONTINUOUS for c in mine) == 1
    # The variants' writers rotate: every backend writes some.
    writers = {c.backend for c in CASES if c.variant or c.action_kind}
    assert writers == {b for _, b in built_pairs()}
