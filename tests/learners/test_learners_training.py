"""``train``: metrics, progress, checkpoints, should_stop, devices, exact resume, and evaluation
that leaves training alone."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from learners.backends import DeviceUnavailable
from learners.checkpoint import CheckpointError, read
from learners.enums import Algorithm, Backend
from learners.hooks import MemoryHooks
from learners.registry import RunnerKind, built_pairs, entry
from learners.spec import ExperimentSpec
from learners.training import train

OFF_POLICY = [(a, b) for a, b in built_pairs() if entry(a).runner == RunnerKind.OFF_POLICY]
# Off-policy variants that store something else (whole episodes), with the backends that have
# built them: their whole hyperparameters, small, on 10-step episodes (a compiled MindSpore update
# unrolls the GRU over the episode length, so short episodes compile several times faster), one
# update every 16 env steps (about 70 in 1,200 steps: an update of a batch of episodes is what
# these runs spend their time on after compiling).
RECURRENT_WQMIX = {
    "hidden_sizes": [32, 32],
    "learning_starts": 100,
    "updates_per_step": 0.0625,
    "recurrent": True,
    "rnn_hidden_size": 16,
    "episode_batch_size": 4,
    "episode_buffer_size": 20,
}
SHORT_EPISODES = {
    "suite": "mpe",
    "id": "simple_spread_v3",
    "num_envs": 2,
    "kwargs": {"max_cycles": 10},
}
RESUME_CASES = [pytest.param(a, b, {}, id=f"{a}-{b}") for a, b in OFF_POLICY] + [
    pytest.param(
        Algorithm.WQMIX,
        b,
        {"hyperparameters": RECURRENT_WQMIX, "env": SHORT_EPISODES},
        id=f"wqmix-{b}-recurrent",
    )
    for b in (Backend.TORCH, Backend.TENSORFLOW, Backend.MINDSPORE)
]


@pytest.mark.parametrize(("algorithm", "backend"), built_pairs())
def test_train_reports_and_checkpoints(
    algorithm: str, backend: str, make_spec: Callable[..., ExperimentSpec], hooks: MemoryHooks
) -> None:
    spec = make_spec(algorithm, backend, total_steps=400)
    train(spec, hooks)
    names = {p.name for p in hooks.points}
    assert {"train/episode_return", "train/episode_length", "eval/episode_return",
            "eval/episode_length", "perf/steps_per_second"} <= names  # fmt: skip
    assert any(n.startswith("learner/") for n in names)
    assert all(np.isfinite(p.value) for p in hooks.points)
    # Several points per call, never one call per scalar.
    assert hooks.metric_batches < len(hooks.points)

    steps = [s for s, _ in hooks.checkpoints]
    assert steps == sorted(set(steps)) and len(steps) >= 2
    assert steps[-1] >= spec.total_steps and hooks.progress_steps[-1] == steps[-1]
    for step, path in hooks.checkpoints:
        assert path is not None
        tensors, manifest = read(path)
        assert manifest.step == step and manifest.algorithm == algorithm
        assert manifest.spec["seed"] == spec.seed and backend in manifest.resumable_on
    evals = hooks.series("eval/episode_return")
    assert evals[-1][0] == steps[-1], "the run ends with an evaluation"


@pytest.mark.parametrize(("algorithm", "backend"), built_pairs())
def test_should_stop_writes_a_final_checkpoint_and_returns(
    algorithm: str, backend: str, make_spec: Callable[..., ExperimentSpec], tmp_path: Path
) -> None:
    spec = make_spec(
        algorithm, backend, total_steps=100_000, evaluation={"every_steps": 50_000, "episodes": 2}
    )
    hooks = MemoryHooks(tmp_path, stop_after=4)
    train(spec, hooks)
    assert hooks.stop_checks == 4, "should_stop is asked once per iteration, and no more after True"
    last_step, path = hooks.checkpoints[-1]
    assert 0 < last_step < spec.total_steps
    assert read(path)[1].step == last_step
    assert hooks.progress_steps[-1] == last_step
    assert not hooks.series("eval/episode_return"), "a stopped run does not evaluate on its way out"
    assert any("stop" in message for _, message in hooks.logs)


@pytest.mark.parametrize(("algorithm", "backend", "variant"), RESUME_CASES)
def test_resume_continues_exactly(
    algorithm: str,
    backend: str,
    variant: dict[str, object],
    make_spec: Callable[..., ExperimentSpec],
    tmp_path: Path,
) -> None:
    """N steps in one go == N/2 steps, checkpoint, resume, N/2 more (the checkpoint falls on an
    episode boundary of every copy, where resume is exact). ``variant``: spec overrides."""
    spec = make_spec(
        algorithm, backend, total_steps=800, checkpoint={"every_steps": 400}, **variant
    )
    whole = MemoryHooks(tmp_path / "whole")
    (tmp_path / "whole").mkdir()
    train(spec, whole)
    assert [s for s, _ in whole.checkpoints] == [400, 800]

    halves = MemoryHooks(tmp_path / "halves")
    (tmp_path / "halves").mkdir()
    half_path = whole.checkpoints[0][1]
    assert half_path is not None
    train(spec, halves, resume_from=half_path)
    assert [s for s, _ in halves.checkpoints] == [800]
    assert all(step > 400 for step in halves.progress_steps)

    expected, _ = read(whole.checkpoints[-1][1])
    resumed, _ = read(halves.checkpoints[-1][1])
    assert set(resumed) == set(expected)
    for name, value in expected.items():
        if value.dtype.kind == "f":
            np.testing.assert_allclose(resumed[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
        else:
            np.testing.assert_array_equal(resumed[name], value, err_msg=name)
    assert halves.series("eval/episode_return")[-1] == pytest.approx(
        whole.series("eval/episode_return")[-1], rel=1e-5
    )


EVALUATION_CASES = [
    pytest.param(a, {}, id=str(a)) for a, b in built_pairs() if b == Backend.TORCH
] + [
    pytest.param(
        Algorithm.MAPPO,
        {"hyperparameters": {"hidden_sizes": [32, 32], "recurrent": True, "rnn_hidden_size": 16}},
        id="mappo-recurrent",
    ),
    pytest.param(
        Algorithm.WQMIX,
        {"hyperparameters": RECURRENT_WQMIX, "env": SHORT_EPISODES},
        id="wqmix-recurrent",
    ),
]


@pytest.mark.parametrize(("algorithm", "variant"), EVALUATION_CASES)
def test_evaluating_often_leaves_training_unchanged(
    algorithm: str,
    variant: dict[str, object],
    make_spec: Callable[..., ExperimentSpec],
    tmp_path: Path,
) -> None:
    """A run evaluated every 100 steps ends with the same checkpoint (weights, optimiser state,
    generators, counters) as the same run evaluated only at its end: greedy acting draws nothing
    from the exploration generator, counts no exploring steps and keeps its recurrent state apart
    from the training copies', so a result does not depend on how often someone watched it."""

    def run(every: int) -> tuple[dict[str, NDArray[Any]], list[tuple[int, float]]]:
        spec = make_spec(
            algorithm,
            Backend.TORCH,
            total_steps=600,
            evaluation={"every_steps": every, "episodes": 3},
            checkpoint={"every_steps": 600},
            **variant,
        )
        (tmp_path / str(every)).mkdir()
        hooks = MemoryHooks(tmp_path / str(every))
        train(spec, hooks)
        path = hooks.checkpoints[-1][1]
        assert path is not None
        return read(path)[0], hooks.series("eval/episode_return")

    often, often_evals = run(100)
    once, once_evals = run(600)
    assert len(often_evals) > 1 and len(once_evals) == 1
    assert set(often) == set(once)
    for name, value in once.items():
        np.testing.assert_array_equal(often[name], value, err_msg=name)
    assert often_evals[-1] == once_evals[-1]


def test_resume_refuses_another_runs_checkpoint(
    make_spec: Callable[..., ExperimentSpec], hooks: MemoryHooks
) -> None:
    spec = make_spec(total_steps=200)
    train(spec, hooks)
    _, path = hooks.checkpoints[-1]
    other_env = make_spec(env={"suite": "gymnasium", "id": "Pendulum-v1", "num_envs": 3})
    with pytest.raises(CheckpointError, match="different environment"):
        train(other_env, MemoryHooks(), resume_from=path)


def test_cuda_without_a_gpu_fails_clearly(make_spec: Callable[..., ExperimentSpec]) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    hooks = MemoryHooks()
    with pytest.raises(DeviceUnavailable, match="cuda"):
        train(make_spec(device="cuda"), hooks)
    assert hooks.points == [] and hooks.checkpoints == []


@pytest.mark.slow
def test_ddpg_learns_pendulum(make_spec: Callable[..., ExperimentSpec], hooks: MemoryHooks) -> None:
    """A learning check, not a benchmark (benchmarks/learning.py has the figures): 4,000 steps take
    the greedy policy from flailing (about -1,300) to mostly balancing (about -200)."""
    spec = make_spec(
        total_steps=4000,
        seed=0,
        env={"suite": "gymnasium", "id": "Pendulum-v1", "num_envs": 1},
        hyperparameters={"hidden_sizes": [128, 128]},
        evaluation={"every_steps": 2000, "episodes": 5},
        checkpoint={"every_steps": 4000},
    )
    train(spec, hooks)
    (_, early), (_, late) = hooks.series("eval/episode_return")
    assert early < -900
    assert late > -400


@pytest.mark.parametrize("stopped", [False, True], ids=["killed", "stopped"])
def test_a_resumed_run_reports_what_an_uninterrupted_run_reports(
    stopped: bool, make_spec: Callable[..., ExperimentSpec], tmp_path: Path
) -> None:
    """The checkpoint keeps the report window: the report at 1,000 steps, after a resume at 800,
    averages the updates and episodes since 0, as the uninterrupted run's does (not those since
    800). ``killed``: resumed from a periodic checkpoint; ``stopped``: from the one a stop wrote
    after reporting (800 is on no checkpoint's grid; both fall on an episode boundary, where
    resume is exact)."""
    spec = make_spec(
        total_steps=1200,
        evaluation={"every_steps": 1200, "episodes": 2},
        checkpoint={"every_steps": 300 if stopped else 400, "keep_last": 10},
    )
    for name in ("whole", "first", "resumed"):
        (tmp_path / name).mkdir()
    whole = MemoryHooks(tmp_path / "whole")
    train(spec, whole)
    if stopped:
        # should_stop is asked once per iteration from step 0, two env copies a step each.
        first = MemoryHooks(tmp_path / "first", stop_after=401)
        train(spec, first)
        at, path = first.checkpoints[-1]
        assert at == 800 and first.series("learner/loss_critic")[-1][0] == 800
    else:
        at, path = 800, dict(whole.checkpoints)[800]
    assert path is not None
    resumed = MemoryHooks(tmp_path / "resumed")
    train(spec, resumed, resume_from=path)

    def after(hooks: MemoryHooks) -> dict[tuple[int, str], float]:
        return {
            (p.step, p.name): p.value
            for p in hooks.points
            if p.step > at and not p.name.startswith("perf/")
        }

    expected, got = after(whole), after(resumed)
    assert (1000, "learner/loss_critic") in expected and (1000, "train/episode_return") in expected
    assert set(got) == set(expected)
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, rel=1e-6), key
