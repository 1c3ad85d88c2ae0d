"""The MindSpore learners beyond the parity suite: MindSpore loads only for MindSpore jobs, the
device is refused clearly, compiled and eager updates agree, a compiled graph sees weights loaded
after it was compiled, and checkpoints cross backends through ``learners.training`` both ways
(train in MindSpore, act and resume in PyTorch and TensorFlow; train in PyTorch, resume in
MindSpore)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from learners.enums import Algorithm, Backend, Device
from learners.hooks import MemoryHooks
from learners.registry import entry
from learners.spec import ExperimentSpec

pytest.importorskip("mindspore")

from learners.backends import DeviceUnavailable, resolve_device  # noqa: E402
from learners.checkpoint import read  # noqa: E402
from learners.policy import load_policy  # noqa: E402
from learners.training import train  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
# The parity suite's cases (small configs, synthetic data with zeros in the masks) serve here too.
sys.path.insert(0, str(REPO / "tests" / "learners" / "parity"))
from parity_cases import build, data, observation, update, variants  # noqa: E402

# What the API process and a torch/tensorflow worker import; none of it may load MindSpore.
NOT_MINDSPORE = (
    "import learners.registry, learners.training, learners.checkpoint, learners.spec\n"
    "import learners.backends.torch.ppo, learners.backends.torch.ddpg\n"
    "import api.app\n"
)


def test_mindspore_is_imported_only_for_mindspore_jobs() -> None:
    probe = NOT_MINDSPORE + (
        "import sys\n"
        "assert 'mindspore' not in sys.modules, 'mindspore was imported'\n"
        "from learners.registry import entry\n"
        "entry('mappo').learner_class('mindspore')\n"
        "assert 'mindspore' in sys.modules\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]


def test_device_cuda_is_refused_and_auto_is_the_cpu() -> None:
    assert resolve_device(Backend.MINDSPORE, Device.AUTO) == "cpu"
    assert resolve_device(Backend.MINDSPORE, Device.CPU) == "cpu"
    with pytest.raises(DeviceUnavailable, match="cuda"):
        resolve_device(Backend.MINDSPORE, Device.CUDA)


def _variant(algorithm: Algorithm, name: str) -> Any:
    return next(v for v in variants(algorithm) if v.name == name)


@pytest.mark.parametrize(
    ("algorithm", "backend", "variant_name"),
    [
        (algorithm, Backend.MINDSPORE, name)
        for algorithm, name in (
            (Algorithm.MAPPO, "discrete-gru-minibatches"),
            (Algorithm.IPPO, "continuous-mlp-minibatches"),
            (Algorithm.DDPG, "clipped"),
            (Algorithm.MADDPG, "discrete-shared"),
            (Algorithm.WQMIX, "cw-shared"),
            (Algorithm.WQMIX, "ow-gru-shared"),
        )
    ],
)
def test_compiled_and_eager_updates_agree(
    algorithm: Algorithm, backend: Backend, variant_name: str
) -> None:
    """``set_compiled(False)`` runs the same cells in PyNative mode: the same stats and state. The
    compiled learner is the parity suite's (``build``: compiled once per variant and process; the
    tests of one variant share a worker)."""
    variant = _variant(algorithm, variant_name)
    compiled = build(algorithm, backend, variant)
    eager = entry(algorithm).learner_class(backend)(variant.config, variant.info, "cpu", 0)
    eager.set_compiled(False)
    for k in range(2):
        want = update(algorithm, compiled, data(algorithm, variant, seed=k), k)
        got = update(algorithm, eager, data(algorithm, variant, seed=k), k)
        for stat, value in want.items():
            assert got[stat] == pytest.approx(value, rel=1e-5, abs=1e-7), stat
    after_compiled, after_eager = compiled.state(), eager.state()
    for key, value in after_compiled.items():
        np.testing.assert_allclose(after_eager[key], value, rtol=1e-5, atol=1e-7, err_msg=key)


def test_recurrent_wqmix_acting_carries_resets_and_drops_the_gru_state() -> None:
    """``explore_step`` advances the runner's memory (one GRU step per call, the same state as the
    unrolled network's), ``reset_memory`` zeroes only the ended copies, and ``act`` keeps its own
    memory, which ``end_episodes`` clears and a loaded policy forgets."""
    variant = _variant(Algorithm.WQMIX, "ow-gru-shared")
    learner = entry(Algorithm.WQMIX).learner_class(Backend.MINDSPORE)(
        variant.config, variant.info, "cpu", 0
    )
    obs = [observation(variant, seed=60 + k) for k in range(3)]
    memory = learner.initial_memory(variant.info.num_envs)
    assert memory.shape == (3, variant.info.num_agents, variant.config.rnn_hidden_size)
    for o in obs:
        _, memory = learner.explore_step(o, memory)
    assert memory.asnumpy().any()
    sequence = learner._tensor(np.stack([o.obs for o in obs]))
    _, unrolled = learner.nets.agent(sequence, learner.initial_memory(3))
    np.testing.assert_allclose(memory.asnumpy(), unrolled.asnumpy(), rtol=1e-6, atol=1e-7)
    reset = learner.reset_memory(memory, np.array([False, True, False])).asnumpy()
    np.testing.assert_array_equal(reset[[0, 2]], memory.asnumpy()[[0, 2]])
    assert not reset[1].any()
    start = learner.state()
    for o in obs:
        learner.act(o, explore=False)
    carried = learner._act_memory.asnumpy()
    np.testing.assert_array_equal(carried, memory.asnumpy())
    learner.end_episodes(np.array([True, False, False]))
    assert not learner._act_memory.asnumpy()[0].any()
    np.testing.assert_array_equal(learner._act_memory.asnumpy()[1:], carried[1:])
    learner.end_episodes(np.array([True]))  # another number of copies: forgotten
    assert learner._act_memory is None
    learner.act(obs[0], explore=False)
    learner.load_state(start, policy_only=True)  # a loaded policy starts afresh
    assert learner._act_memory is None


def test_loading_weights_after_compiling_reaches_the_compiled_graphs() -> None:
    """MindSpore's compiled graphs keep the memory a parameter had when they were compiled, so a
    learner that swapped parameter data in (``Parameter.set_data``) would go on acting, and
    training, with the old weights. Loading must write into the parameters instead."""
    variant = _variant(Algorithm.MAPPO, "discrete-mlp-shared")
    cls = entry(Algorithm.MAPPO).learner_class(Backend.MINDSPORE)
    learner = cls(variant.config, variant.info, "cpu", 0)
    initial = learner.state()
    obs = observation(variant, seed=5)
    update(Algorithm.MAPPO, learner, data(Algorithm.MAPPO, variant, seed=0), 0)  # compiles all
    trained = learner.state()
    zeros = {k: np.zeros_like(v) if k.startswith("actor.") else v for k, v in initial.items()}
    learner.load_state(zeros)
    # A zero actor gives equal logits everywhere: argmax picks the first available action.
    np.testing.assert_array_equal(learner.act(obs, explore=False), obs.avail_actions.argmax(-1))
    learner.load_state(trained)
    reference = cls(variant.config, variant.info, "cpu", 1)
    reference.set_compiled(False)
    reference.load_state(trained)
    np.testing.assert_array_equal(
        learner.act(obs, explore=False), reference.act(obs, explore=False)
    )


# -- checkpoints across backends, through the training entry point ---------------------------------

CROSS = [Algorithm.MAPPO, Algorithm.DDPG, Algorithm.MADDPG, Algorithm.WQMIX]


def _train(spec: ExperimentSpec, directory: Path, resume_from: Path | None = None) -> MemoryHooks:
    directory.mkdir(parents=True, exist_ok=True)
    hooks = MemoryHooks(checkpoint_dir=directory)
    train(spec, hooks, resume_from=resume_from)
    return hooks


def _last_checkpoint(hooks: MemoryHooks) -> Path:
    path = hooks.checkpoints[-1][1]
    assert path is not None
    return path


def _same_greedy_actions(path: Path, backends: list[Backend]) -> None:
    policies = [load_policy(path, backend) for backend in backends]
    info = policies[0].info
    from learners.envs.base import Observation

    rng = np.random.default_rng(0)
    e, n = 4, info.num_agents
    discrete = info.action_kind == "discrete"
    avail = np.ones((e, n, info.action_dim if discrete else 0), np.float32)
    obs = Observation(
        obs=rng.normal(size=(e, n, info.obs_dim)).astype(np.float32),
        obs_mask=np.ones((e, n, info.obs_dim), np.float32),
        state=rng.normal(size=(e, info.state_dim)).astype(np.float32),
        agent_mask=np.ones((e, n), np.float32),
        avail_actions=avail,
    )
    actions = [np.asarray(policy.act(obs)) for policy in policies]
    for backend, got in zip(backends[1:], actions[1:], strict=True):
        if discrete:
            np.testing.assert_array_equal(got, actions[0], err_msg=str(backend))
        else:
            np.testing.assert_allclose(got, actions[0], rtol=1e-5, atol=1e-6, err_msg=str(backend))


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", CROSS, ids=lambda a: a.value)
def test_trained_in_mindspore_acts_and_resumes_in_torch_and_tensorflow(
    algorithm: Algorithm, make_spec: Callable[..., ExperimentSpec], tmp_path: Path
) -> None:
    spec = make_spec(algorithm, Backend.MINDSPORE, total_steps=400, checkpoint={"every_steps": 400})
    path = _last_checkpoint(_train(spec, tmp_path / "mindspore"))
    manifest_backends = read(path)[1]
    assert manifest_backends.backend == Backend.MINDSPORE
    others = [b for b in (Backend.TORCH, Backend.TENSORFLOW) if b in entry(algorithm).backends]
    assert set(others) <= set(manifest_backends.resumable_on)
    _same_greedy_actions(path, [Backend.MINDSPORE, *others])
    for backend in others:
        resumed = spec.model_copy(update={"backend": backend, "total_steps": 600})
        hooks = _train(resumed, tmp_path / backend.value, resume_from=path)
        assert [s for s, _ in hooks.checkpoints] == [600]
        assert read(_last_checkpoint(hooks))[1].backend == backend


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", CROSS, ids=lambda a: a.value)
def test_trained_in_torch_resumes_in_mindspore(
    algorithm: Algorithm, make_spec: Callable[..., ExperimentSpec], tmp_path: Path
) -> None:
    spec = make_spec(algorithm, Backend.TORCH, total_steps=400, checkpoint={"every_steps": 400})
    path = _last_checkpoint(_train(spec, tmp_path / "torch"))
    _same_greedy_actions(path, [Backend.TORCH, Backend.MINDSPORE])
    resumed = spec.model_copy(update={"backend": Backend.MINDSPORE, "total_steps": 600})
    hooks = _train(resumed, tmp_path / "mindspore", resume_from=path)
    tensors, manifest = read(_last_checkpoint(hooks))
    assert manifest.backend == Backend.MINDSPORE and manifest.step == 600
    assert all(np.isfinite(v).all() for k, v in tensors.items() if v.dtype.kind == "f")


@pytest.mark.parametrize(
    "algorithm", [a for a in Algorithm if Backend.MINDSPORE in entry(a).backends], ids=str
)
def test_same_seed_same_initial_weights_as_tensorflow(algorithm: Algorithm) -> None:
    """Both backends draw their initial weights from the ``init`` NumPy generator in the same
    order and shapes: one seed, one set of starting weights (the checkpoint stays what parity relies
    on; this makes a fresh run in either backend start from the same point)."""
    pytest.importorskip("tensorflow")
    for variant in variants(algorithm)[:4]:
        states = [
            entry(algorithm).learner_class(backend)(variant.config, variant.info, "cpu", 3).state()
            for backend in (Backend.TENSORFLOW, Backend.MINDSPORE)
        ]
        assert set(states[0]) == set(states[1])
        for key, value in states[0].items():
            if not key.startswith(("optim/", "rng/", "counters/", "value_norm")):
                np.testing.assert_array_equal(states[1][key], value, err_msg=key)
