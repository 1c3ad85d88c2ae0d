"""Whole runs across backends through the portable checkpoint: train in TensorFlow, then evaluate
and resume in PyTorch, and the reverse. The manifest says every backend can resume the file; the
policies act the same in either backend; a resumed run continues on the same step axis."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from learners.checkpoint import read, read_manifest
from learners.enums import Algorithm, Backend
from learners.envs.factory import make_vec_env
from learners.hooks import MemoryHooks
from learners.policy import load_policy
from learners.spec import ExperimentSpec
from learners.training import train

pytest.importorskip("tensorflow")
pytest.importorskip("torch")

DIRECTIONS = [(Backend.TENSORFLOW, Backend.TORCH), (Backend.TORCH, Backend.TENSORFLOW)]


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", [Algorithm.DDPG, Algorithm.MAPPO])
@pytest.mark.parametrize(("trained", "resumed"), DIRECTIONS, ids=["tf-to-torch", "torch-to-tf"])
def test_train_in_one_backend_evaluate_and_resume_in_the_other(
    algorithm: Algorithm,
    trained: Backend,
    resumed: Backend,
    make_spec: Callable[..., ExperimentSpec],
    tmp_path: Path,
) -> None:
    spec = make_spec(algorithm, trained, total_steps=400)
    first = MemoryHooks(tmp_path / "first")
    (tmp_path / "first").mkdir()
    train(spec, first)
    step, path = first.checkpoints[0]
    assert path is not None and 0 < step < spec.total_steps
    manifest = read_manifest(path)
    assert manifest.backend == trained
    assert set(manifest.resumable_on) >= {trained, resumed}

    # Evaluate: the other backend's policy acts like the one that trained.
    env = make_vec_env(spec.env, seed=5)
    obs = env.reset()
    want = load_policy(path, backend=trained).act(obs)
    got = load_policy(path, backend=resumed).act(obs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    env.close()

    # Resume: the other backend continues the run from the checkpoint's step to the end.
    second = MemoryHooks(tmp_path / "second")
    (tmp_path / "second").mkdir()
    other = spec.model_copy(update={"backend": resumed})
    train(other, second, resume_from=path)
    assert second.progress_steps[0] > step and second.progress_steps[-1] >= spec.total_steps
    final_step, final_path = second.checkpoints[-1]
    assert final_path is not None and final_step >= spec.total_steps
    tensors, final = read(final_path)
    assert final.backend == resumed and final.step == final_step
    assert int(tensors["counters/updates"]) > int(read(path)[0]["counters/updates"])
