"""The policy-only export (learners.exports): for every algorithm the file keeps exactly the tensors
the learner says acting needs, acts as the full checkpoint does, cannot resume, and is smaller."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import safetensors
import safetensors.numpy

from learners import checkpoint
from learners.checkpoint import CheckpointError, read, read_manifest, write
from learners.enums import Algorithm, Backend
from learners.envs.factory import make_vec_env
from learners.exports import export_policy
from learners.policy import load_policy
from learners.registry import entry
from learners.spec import ExperimentSpec
from tests.learners.test_learners_checkpoint import manifest_for

VARIANTS = [
    *((a, {}) for a in Algorithm),
    (Algorithm.MAPPO, {"recurrent": True}),
    (Algorithm.WQMIX, {"recurrent": True}),
]


@pytest.mark.parametrize(
    ("algorithm", "extra"), VARIANTS, ids=[f"{a}{'-rnn' if e else ''}" for a, e in VARIANTS]
)
def test_the_export_holds_the_acting_network_alone_and_acts_as_the_checkpoint_does(
    algorithm: Algorithm,
    extra: dict[str, bool],
    tmp_path: Path,
    make_spec: Callable[..., ExperimentSpec],
) -> None:
    base = make_spec(algorithm)
    spec = make_spec(algorithm, hyperparameters={**base.hyperparameters, **extra})
    env = make_vec_env(spec.env, spec.seed)
    learner = entry(algorithm).learner_class(Backend.TORCH)(
        spec.config(), env.info, "cpu", spec.seed
    )
    full = tmp_path / "step-1.safetensors"
    write(full, learner.state(), manifest_for(spec, checkpoint.env_info_to_json(env.info)))

    exported = export_policy(full, tmp_path / "policy.safetensors")

    assert exported.tensors == sorted(learner.policy_tensor_names())
    assert sorted(safetensors.numpy.load_file(str(exported.path))) == exported.tensors
    assert exported.bytes == exported.path.stat().st_size < exported.source_bytes
    manifest = read_manifest(exported.path)
    assert (manifest.contents, manifest.resumable_on, manifest.runner) == ("policy", [], {})
    assert manifest.spec == read_manifest(full).spec and manifest.env == read_manifest(full).env
    observations = [env.reset()]
    for _ in range(3):
        observations.append(env.step(learner.act(observations[-1], explore=True))[0])
    from_export, from_full = load_policy(exported.path), load_policy(full)
    for observation in observations:
        np.testing.assert_array_equal(from_export.act(observation), from_full.act(observation))
    # An export exports as itself.
    again = export_policy(exported.path, tmp_path / "again.safetensors")
    assert again.tensors == exported.tensors
    for name, value in read(again.path)[0].items():
        np.testing.assert_array_equal(value, read(exported.path)[0][name], err_msg=name)
    env.close()


def test_a_file_without_the_policys_tensors_is_refused_and_nothing_is_written(
    tmp_path: Path, make_spec: Callable[..., ExperimentSpec]
) -> None:
    spec = make_spec(Algorithm.DDPG)
    env = make_vec_env(spec.env, spec.seed)
    source = tmp_path / "critic-only.safetensors"
    tensors = {"critic.layers.0.weight": np.zeros((4, 4), np.float32)}
    write(source, tensors, manifest_for(spec, checkpoint.env_info_to_json(env.info)))

    with pytest.raises(CheckpointError, match=r"no tensor of the ddpg policy \(actor\.\*\)"):
        export_policy(source, tmp_path / "out.safetensors")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["critic-only.safetensors"]
    env.close()
