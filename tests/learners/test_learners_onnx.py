"""A policy outside MARLForge: the layout a policy-only export documents (``network`` in its
manifest) rebuilt with NumPy alone, as docs/using-results.md#the-layout describes it, and the ONNX
model compiled from it run by onnxruntime. Both give the learner's own greedy actions: NumPy to
1e-6, onnxruntime to 1e-5, over recorded observations, for every algorithm and every backend, the
recurrent policies with their state carried from step to step."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import astuple
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
import safetensors.numpy

from learners import checkpoint
from learners.checkpoint import CheckpointError, Manifest, read_manifest, write
from learners.enums import Algorithm, Backend
from learners.envs.base import Observation
from learners.envs.factory import make_vec_env
from learners.exports import NumpyPolicy, export_onnx, export_policy
from learners.registry import entry
from learners.spec import ExperimentSpec
from tests.learners.test_learners_checkpoint import manifest_for

STEPS = 12


# -- the reader a user writes from the docs: NumPy and the manifest, nothing of MARLForge ------


def numpy_policy(
    network: Mapping[str, Any],
    tensors: Mapping[str, np.ndarray],
    obs: np.ndarray,
    mask: np.ndarray | None,
    memory: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(actions, outputs, memory after) for ``obs`` (batch, N, obs_dim), following the layout."""

    def linear(x: np.ndarray, step: Mapping[str, Any]) -> np.ndarray:
        weight, bias = tensors[step["weight"]], tensors[step["bias"]]
        if "row" in step:
            weight, bias = weight[step["row"]], bias[step["row"]]
        return x @ weight.T + bias

    def sigmoid(x: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-x))

    outputs, states = [], []
    for agent in network["agents"]:
        i = agent["index"]
        x = obs[:, i].astype(np.float64)
        for step in agent["steps"]:
            if step["op"] == "one_hot":
                ids = np.zeros((x.shape[0], step["width"]))
                ids[:, step["index"]] = 1.0
                x = np.concatenate([x, ids], axis=-1)
            elif step["op"] == "linear":
                x = linear(x, step)
            elif step["op"] == "relu":
                x = np.maximum(x, 0.0)
            elif step["op"] == "tanh":
                x = np.tanh(x)
            elif step["op"] == "gru":
                assert memory is not None
                h = memory[:, i].astype(np.float64)
                x_r, x_z, x_n = np.split(linear(x, step["input"]), 3, axis=-1)
                h_r, h_z, h_n = np.split(linear(h, step["hidden"]), 3, axis=-1)
                r, z = sigmoid(x_r + h_r), sigmoid(x_z + h_z)
                n = np.tanh(x_n + r * h_n)
                x = (1.0 - z) * n + z * h
                states.append(x)
            else:
                raise AssertionError(step)
        outputs.append(x)
    out = np.stack(outputs, axis=1)
    rule = network["output"]
    if rule["kind"] == "discrete":
        available = mask > 0.5
        for j, size in enumerate(rule["sizes"]):
            available[:, j, size:] = False
        scores = np.where(available, out, rule["masked_value"])
        return np.argmax(scores, axis=-1), scores, np.stack(states, 1) if states else None
    return np.clip(out, -1.0, 1.0), out, np.stack(states, 1) if states else None


# -- checkpoints of every kind -------------------------------------------------------------------


def _spec(
    make_spec: Callable[..., ExperimentSpec], algorithm: Algorithm, backend: Backend, **kw: Any
) -> ExperimentSpec:
    base = make_spec(algorithm, backend)
    env = kw.pop("env", None)
    overrides: dict[str, Any] = {"hyperparameters": {**base.hyperparameters, **kw}}
    if env is not None:
        overrides["env"] = {"suite": "mpe", "num_envs": 2, **env}
    return make_spec(algorithm, backend, **overrides)


def _checkpoint(spec: ExperimentSpec, path: Path) -> tuple[Any, Any]:
    env = make_vec_env(spec.env, spec.seed)
    learner = entry(spec.algorithm).learner_class(spec.backend)(
        spec.config(), env.info, "cpu", spec.seed
    )
    write(path, learner.state(), manifest_for(spec, checkpoint.env_info_to_json(env.info)))
    return env, learner


def _recorded(env: Any, learner: Any) -> list[Observation]:
    """Observations along the learner's own greedy play (its recurrent state advances once per
    step, as a user's would), with the actions it took."""
    observation, seen = env.reset(), []
    for _ in range(STEPS):
        actions = learner.act(observation, explore=False)
        # (a copy: an env may write its next observation into the same arrays)
        seen.append((Observation(*(np.array(f) for f in astuple(observation))), actions))
        observation = env.step(actions)[0]
    env.close()
    return seen


LAYOUTS: dict[str, tuple[Algorithm, dict[str, Any]]] = {
    "ddpg": (Algorithm.DDPG, {}),
    "maddpg-discrete-shared": (Algorithm.MADDPG, {}),
    "maddpg-continuous": (
        Algorithm.MADDPG,
        {"env": {"id": "simple_spread_v3", "kwargs": {"continuous_actions": True}}},
    ),
    "maddpg-teams": (
        Algorithm.MADDPG,
        {"env": {"id": "simple_adversary_v3", "kwargs": {"continuous_actions": True}}},
    ),
    "maddpg-per-agent": (Algorithm.MADDPG, {"share_parameters": False}),
    "ippo": (Algorithm.IPPO, {}),
    "ippo-continuous-per-agent": (
        Algorithm.IPPO,
        {
            "share_parameters": False,
            "env": {"id": "simple_spread_v3", "kwargs": {"continuous_actions": True}},
        },
    ),
    "mappo-tanh": (Algorithm.MAPPO, {"activation": "tanh"}),
    "mappo-teams": (
        Algorithm.MAPPO,
        {"env": {"id": "simple_tag_v3", "kwargs": {"continuous_actions": False}}},
    ),
    "mappo-rnn-mixed-agents": (
        Algorithm.MAPPO,
        {
            "recurrent": True,
            "env": {"id": "simple_speaker_listener_v4", "kwargs": {"continuous_actions": False}},
        },
    ),
    "mappo-rnn-per-agent-3-layers": (
        Algorithm.MAPPO,
        {"recurrent": True, "share_parameters": False, "hidden_sizes": [16, 24, 8]},
    ),
    "mappo-mixed-agents-across-groups": (
        Algorithm.MAPPO,
        {
            "share_across_groups": True,
            "env": {"id": "simple_speaker_listener_v4", "kwargs": {"continuous_actions": True}},
        },
    ),
    "maddpg-groups": (
        Algorithm.MADDPG,
        {"env": {"id": "simple_speaker_listener_v4", "kwargs": {"continuous_actions": False}}},
    ),
    "wqmix": (Algorithm.WQMIX, {}),
    "wqmix-rnn-groups": (
        Algorithm.WQMIX,
        {
            "recurrent": True,
            "env": {"id": "simple_speaker_listener_v4", "kwargs": {"continuous_actions": False}},
        },
    ),
    "wqmix-rnn-per-agent": (Algorithm.WQMIX, {"recurrent": True, "share_parameters": False}),
    "wqmix-rnn-one-layer": (Algorithm.WQMIX, {"recurrent": True, "hidden_sizes": [16]}),
}


@pytest.mark.parametrize("case", sorted(LAYOUTS))
def test_the_documented_layout_rebuilt_with_numpy_acts_as_the_learner_does(
    case: str, tmp_path: Path, make_spec: Callable[..., ExperimentSpec]
) -> None:
    algorithm, extra = LAYOUTS[case]
    spec = _spec(make_spec, algorithm, Backend.TORCH, **extra)
    env, learner = _checkpoint(spec, tmp_path / "full.safetensors")
    exported = export_policy(tmp_path / "full.safetensors", tmp_path / "policy.safetensors")
    network = read_manifest(exported.path).network
    assert network is not None and network["format"] == 1
    tensors = safetensors.numpy.load_file(str(exported.path))
    # The layout names tensors the export holds (and the export holds nothing it does not read
    # but PPO's log std, which only sampling uses).
    named = {n for a in network["agents"] for s in a["steps"] for n in _names(s)}
    assert named <= set(tensors) and set(tensors) - named <= {"actor.log_std"}
    memory = None
    if network["memory"] is not None:
        memory = np.zeros((spec.env.num_envs, *network["memory"]["shape"][1:]))
    for observation, taken in _recorded(env, learner):
        actions, _, memory = numpy_policy(
            network, tensors, observation.obs, observation.avail_actions, memory
        )
        if network["output"]["kind"] == "discrete":
            np.testing.assert_array_equal(actions, taken)
        else:
            np.testing.assert_allclose(actions, taken, rtol=0, atol=1e-6)


@pytest.mark.parametrize("case", sorted(LAYOUTS))
def test_the_services_numpy_policy_acts_as_the_learner_does(
    case: str, tmp_path: Path, make_spec: Callable[..., ExperimentSpec]
) -> None:
    """``learners.exports.NumpyPolicy``, what the inference route acts with, in float32."""
    algorithm, extra = LAYOUTS[case]
    spec = _spec(make_spec, algorithm, Backend.TORCH, **extra)
    env, learner = _checkpoint(spec, tmp_path / "full.safetensors")
    policy = NumpyPolicy.load(tmp_path / "full.safetensors")
    assert policy.nbytes > 0
    memory = None
    for observation, taken in _recorded(env, learner):
        actions, memory = policy.forward(observation.obs, observation.avail_actions, memory)
        assert (memory is None) == (policy.memory_size is None)
        if policy.discrete:
            np.testing.assert_array_equal(actions, taken)
        else:
            np.testing.assert_allclose(actions, taken, rtol=0, atol=1e-6)


def _names(step: Mapping[str, Any]) -> list[str]:
    if step["op"] == "linear":
        return [step["weight"], step["bias"]]
    if step["op"] == "gru":
        return [*_names(step["input"]), *_names(step["hidden"])]
    return []


ONNX_CASES = [
    (algorithm, extra, backend)
    for algorithm, extra in (
        *((a, {}) for a in Algorithm),
        (Algorithm.MAPPO, {"recurrent": True}),
        (Algorithm.WQMIX, {"recurrent": True}),
    )
    for backend in Backend
]


@pytest.mark.parametrize(
    ("algorithm", "extra", "backend"),
    ONNX_CASES,
    ids=[f"{a}{'-rnn' if e else ''}-{b}" for a, e, b in ONNX_CASES],
)
def test_onnxruntime_runs_the_onnx_export_as_the_learner_acts(
    algorithm: Algorithm,
    extra: dict[str, Any],
    backend: Backend,
    tmp_path: Path,
    make_spec: Callable[..., ExperimentSpec],
) -> None:
    spec = _spec(make_spec, algorithm, backend, **extra)
    env, learner = _checkpoint(spec, tmp_path / "full.safetensors")
    made = export_onnx(tmp_path / "full.safetensors", tmp_path / "policy.onnx")
    assert made.bytes == made.path.stat().st_size
    model = onnx.load(str(made.path))
    manifest = Manifest.model_validate_json(
        {p.key: p.value for p in model.metadata_props}["marlforge"]
    )
    assert (manifest.contents, manifest.backend, manifest.algorithm) == (
        "policy",
        backend,
        algorithm,
    )
    discrete = manifest.network is not None and manifest.network["output"]["kind"] == "discrete"
    session = onnxruntime.InferenceSession(str(made.path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    assert names == ["obs", *(["action_mask"] if discrete else []), *(["memory"] if extra else [])]
    memory = None
    if extra:
        memory = np.zeros(
            (spec.env.num_envs, env.info.num_agents, spec.config().rnn_hidden_size), np.float32
        )
    worst = 0.0
    for observation, taken in _recorded(env, learner):
        feed = {"obs": observation.obs.astype(np.float32)}
        if discrete:
            feed["action_mask"] = observation.avail_actions.astype(np.float32)
        if memory is not None:
            feed["memory"] = memory
        out = dict(
            zip([o.name for o in session.get_outputs()], session.run(None, feed), strict=True)
        )
        if memory is not None:
            memory = out["memory_out"]
        if discrete:
            np.testing.assert_array_equal(out["actions"], taken)
            assert out["scores"].shape == observation.avail_actions.shape
        else:
            worst = max(worst, float(np.abs(out["actions"] - taken).max()))
            info = env.info
            half = 0.5 * (info.action_high - info.action_low)
            np.testing.assert_allclose(
                out["env_actions"], out["actions"] * half + info.action_low + half, atol=1e-6
            )
    assert worst <= 1e-5


def test_the_onnx_scores_are_the_numpy_readers_outputs(
    tmp_path: Path, make_spec: Callable[..., ExperimentSpec]
) -> None:
    """Beyond the argmax: the masked logits of a discrete policy agree to 1e-5."""
    spec = _spec(make_spec, Algorithm.MAPPO, Backend.TORCH, recurrent=True)
    env, learner = _checkpoint(spec, tmp_path / "full.safetensors")
    export_policy(tmp_path / "full.safetensors", tmp_path / "policy.safetensors")
    export_onnx(tmp_path / "policy.safetensors", tmp_path / "policy.onnx")  # from the export too
    network = read_manifest(tmp_path / "policy.safetensors").network
    tensors = safetensors.numpy.load_file(str(tmp_path / "policy.safetensors"))
    session = onnxruntime.InferenceSession(str(tmp_path / "policy.onnx"))
    ours = theirs = np.zeros((2, env.info.num_agents, spec.config().rnn_hidden_size), np.float32)
    for observation, _ in _recorded(env, learner):
        mask = observation.avail_actions.astype(np.float32)
        _, scores, ours = numpy_policy(network, tensors, observation.obs, mask, ours)
        _, onnx_scores, theirs = session.run(
            None, {"obs": observation.obs.astype(np.float32), "action_mask": mask, "memory": theirs}
        )
        np.testing.assert_allclose(onnx_scores, scores, rtol=0, atol=1e-5)
        np.testing.assert_allclose(theirs, ours, rtol=0, atol=1e-5)


def test_a_file_without_the_policy_is_refused_and_nothing_is_written(
    tmp_path: Path, make_spec: Callable[..., ExperimentSpec]
) -> None:
    spec = make_spec(Algorithm.DDPG)
    env = make_vec_env(spec.env, spec.seed)
    source = tmp_path / "critic-only.safetensors"
    tensors = {"critic.layers.0.weight": np.zeros((4, 4), np.float32)}
    write(source, tensors, manifest_for(spec, checkpoint.env_info_to_json(env.info)))
    env.close()
    with pytest.raises(
        CheckpointError, match=r"lacks the policy tensors \['actor\.layers\.0\.bias'"
    ):
        export_onnx(source, tmp_path / "policy.onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["critic-only.safetensors"]
