"""The checkpoint format: write/read round trip, the manifest, and load_policy; and a save/load
round trip of every learner in the registry."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy

from learners import checkpoint
from learners.checkpoint import CheckpointError, Manifest, read, read_manifest, write
from learners.enums import Backend
from learners.envs.factory import make_vec_env
from learners.policy import load_policy
from learners.registry import built_pairs, entry
from learners.spec import ExperimentSpec


def manifest_for(spec: ExperimentSpec, info_json: dict, step: int = 0) -> Manifest:
    return Manifest(
        algorithm=spec.algorithm,
        backend=spec.backend,
        spec=spec.model_dump(mode="json"),
        env=info_json,
        step=step,
        runner={"kind": "test"},
        resumable_on=[spec.backend],
        policy_backends=sorted(entry(spec.algorithm).backends),
    )


def test_write_read_round_trip(tmp_path: Path, make_spec: Callable[..., ExperimentSpec]) -> None:
    spec = make_spec()
    env = make_vec_env(spec.env, spec.seed)
    tensors = {
        "actor.layers.0.weight": np.arange(12, dtype=np.float32).reshape(4, 3),
        "counters/updates": np.array(7, np.int64),
        "rng/runner": np.arange(6, dtype=np.uint64),
        "replay/terminated": np.zeros((0,), np.float32),
    }
    manifest = manifest_for(spec, checkpoint.env_info_to_json(env.info), step=1234)
    path = tmp_path / "c.safetensors"
    write(path, tensors, manifest)
    loaded, loaded_manifest = read(path)
    assert loaded_manifest == manifest and read_manifest(path).step == 1234
    assert set(loaded) == set(tensors)
    for name, value in tensors.items():
        assert loaded[name].dtype == value.dtype
        np.testing.assert_array_equal(loaded[name], value)
    info = checkpoint.env_info_from_json(loaded_manifest.env)
    assert info.obs_dims == env.info.obs_dims
    np.testing.assert_array_equal(info.action_high, env.info.action_high)
    # The manifest is plain JSON in the safetensors header, readable by any safetensors reader.
    with open(path, "rb") as handle:
        header_len = int.from_bytes(handle.read(8), "little")
        header = json.loads(handle.read(header_len))
    assert json.loads(header["__metadata__"]["marlforge"])["format_version"] == 1
    env.close()


def test_not_a_checkpoint(tmp_path: Path) -> None:
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError):
        read_manifest(junk)
    plain = tmp_path / "plain.safetensors"
    safetensors.numpy.save_file({"x": np.zeros(2, np.float32)}, str(plain))
    with pytest.raises(CheckpointError, match="no MARLForge manifest"):
        read_manifest(plain)


def test_newer_format_is_refused(tmp_path: Path, make_spec: Callable[..., ExperimentSpec]) -> None:
    spec = make_spec()
    manifest = manifest_for(spec, {}).model_copy(update={"format_version": 99})
    path = tmp_path / "future.safetensors"
    write(path, {"x": np.zeros(1, np.float32)}, manifest)
    with pytest.raises(CheckpointError, match="format 99"):
        read_manifest(path)


@pytest.mark.parametrize(("algorithm", "backend"), built_pairs())
def test_learner_state_round_trip_and_policy(
    algorithm: str, backend: str, tmp_path: Path, make_spec: Callable[..., ExperimentSpec]
) -> None:
    spec = make_spec(algorithm, backend)
    env = make_vec_env(spec.env, spec.seed)
    cls = entry(algorithm).learner_class(backend)
    learner = cls(spec.config(), env.info, "cpu", spec.seed)
    obs = env.reset()
    state = learner.state()
    assert set(learner.policy_tensor_names()) <= set(state)
    assert all(not name.startswith("optim/") for name in learner.policy_tensor_names())

    path = tmp_path / "learner.safetensors"
    write(path, state, manifest_for(spec, checkpoint.env_info_to_json(env.info)))
    policy = load_policy(path)
    np.testing.assert_allclose(policy.act(obs), learner.act(obs, explore=False), rtol=1e-6)

    # A learner built from another seed becomes the first one after load_state.
    other = cls(spec.config(), env.info, "cpu", spec.seed + 1)
    assert not np.allclose(other.act(obs, explore=False), learner.act(obs, explore=False))
    other.load_state(read(path)[0])
    for name, value in other.state().items():
        np.testing.assert_array_equal(value, state[name], err_msg=name)
    env.close()


def test_load_policy_refuses_a_backend_it_cannot_use(
    tmp_path: Path, make_spec: Callable[..., ExperimentSpec]
) -> None:
    spec = make_spec()
    manifest = manifest_for(spec, {}).model_copy(update={"policy_backends": [Backend.TORCH]})
    path = tmp_path / "c.safetensors"
    write(path, {"x": np.zeros(1, np.float32)}, manifest)
    with pytest.raises(CheckpointError, match="not by mindspore"):
        load_policy(path, backend="mindspore")


def test_torch_optimiser_state_is_loaded_as_a_copy() -> None:
    """Adam updates its moments in place; loaded from a checkpoint's arrays, it must not write
    into them, or one checkpoint loaded twice (two learners, or OW then CW) starts differently."""
    torch = pytest.importorskip("torch")
    from learners.backends.torch.networks import load_optimizer, optimizer_state

    module = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(module.parameters(), lr=1e-2)
    module(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    tensors = optimizer_state("net", optimizer, "net", module)
    before = {k: v.copy() for k, v in tensors.items()}

    fresh = torch.optim.Adam(module.parameters(), lr=1e-2)
    load_optimizer("net", fresh, "net", module, tensors)
    module(torch.full((1, 3), 2.0)).sum().backward()
    fresh.step()
    assert int(fresh.state[module.weight]["step"]) == 2  # the loaded state was stepped
    for key, value in before.items():
        np.testing.assert_array_equal(tensors[key], value, err_msg=key)


def test_load_policy_refuses_networks_of_another_layout(
    tmp_path: Path, make_spec: Callable[..., ExperimentSpec]
) -> None:
    """A multi-team MAPPO checkpoint written when one network served both teams (what a run on
    simple_tag wrote before sharing stopped at a team's edge) is a CheckpointError naming the
    tensors, not a framework error from deep inside a load."""
    import dataclasses

    env_spec = {"suite": "mpe", "id": "simple_tag_v3", "kwargs": {"max_cycles": 25}}
    spec = make_spec("mappo", "torch", env=env_spec)
    env = make_vec_env(spec.env, spec.seed)
    assert len(env.info.team_names) == 2
    cls = entry("mappo").learner_class("torch")
    one_team = dataclasses.replace(env.info, teams=("agent",) * env.info.num_agents)
    old = cls(spec.config(), one_team, "cpu", spec.seed).state()
    path = tmp_path / "old.safetensors"
    write(path, old, manifest_for(spec, checkpoint.env_info_to_json(env.info)))
    with pytest.raises(CheckpointError, match=r"another layout: .*actor\.layers\.0\.weight"):
        load_policy(path)
    env.close()
