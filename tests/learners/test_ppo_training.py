"""MAPPO/IPPO through ``learners.training.train``: exact resume, recurrent evaluation, and a short
learning run that must beat a random policy on simple_spread_v3."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from learners import rng
from learners.admission.parse import parse_spec
from learners.checkpoint import read
from learners.envs.base import VecEnv
from learners.envs.factory import make_vec_env
from learners.hooks import MemoryHooks
from learners.spec import MAX_EVAL_ENVS, ExperimentSpec
from learners.training import train

pytest.importorskip("torch")


SMALL = {"hidden_sizes": [32, 32], "rollout_length": 25, "epochs": 2}


def spec_for(algorithm: str, total_steps: int, **changes: Any) -> ExperimentSpec:
    """A spec on simple_spread_v3; ``hyperparameters`` are added to ``SMALL`` unless it is None
    (then the algorithm's MPE defaults apply)."""
    extra = changes.pop("hyperparameters", {})
    hyperparameters = {} if extra is None else {**SMALL, **extra}
    data = {
        "name": "ppo-test",
        "algorithm": algorithm,
        "backend": "torch",
        "env": {"suite": "mpe", "id": "simple_spread_v3", "num_envs": 2},
        "total_steps": total_steps,
        "seed": 5,
        "device": "cpu",
        "hyperparameters": hyperparameters,
        "evaluation": {"every_steps": 100, "episodes": 2},
        "checkpoint": {"every_steps": 100},
        **changes,
    }
    return parse_spec(data)


@pytest.mark.parametrize("recurrent", [False, True], ids=["mlp", "gru"])
def test_on_policy_resume_continues_exactly(tmp_path: Path, recurrent: bool) -> None:
    """200 steps in one go == 100 steps, checkpoint, resume, 100 more: rollouts of 25 steps of
    2 copies end on episode boundaries, where resuming is exact."""
    spec = spec_for("mappo", 200, hyperparameters={"recurrent": recurrent, "chunk_length": 10})
    (tmp_path / "whole").mkdir()
    (tmp_path / "halves").mkdir()
    whole = MemoryHooks(tmp_path / "whole")
    train(spec, whole)
    assert [s for s, _ in whole.checkpoints] == [100, 200]
    halves = MemoryHooks(tmp_path / "halves")
    train(spec, halves, resume_from=whole.checkpoints[0][1])
    expected, _ = read(whole.checkpoints[-1][1])
    resumed, _ = read(halves.checkpoints[-1][1])
    assert set(resumed) == set(expected)
    for name, value in expected.items():
        np.testing.assert_allclose(resumed[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    assert int(expected["counters/updates"]) == 4
    assert halves.series("eval/episode_return")[-1] == pytest.approx(
        whole.series("eval/episode_return")[-1], rel=1e-5
    )


def test_budget_is_not_overrun_by_the_last_rollout() -> None:
    hooks = MemoryHooks()
    train(spec_for("ippo", 130, hyperparameters={"recurrent": True, "chunk_length": 5}), hooks)
    assert hooks.progress_steps[-1] == 130  # two rollouts of 50 steps, then one of 30
    updates = [v for s, v in hooks.series("learner/loss")]
    assert updates and all(np.isfinite(updates))
    evals = hooks.series("eval/episode_return")
    assert evals and all(np.isfinite(v) for _, v in evals)


def random_policy_return(env: VecEnv, episodes: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    obs = env.reset(episode_index=np.zeros(env.info.num_envs, np.int64))
    returns: list[float] = []
    while len(returns) < episodes:
        actions = rng.integers(
            0, env.info.action_dim, size=(env.info.num_envs, env.info.num_agents)
        )
        obs, transition = env.step(actions)
        returns += [float(r) for r, n in zip(transition.episode_returns, transition.episode_lengths,
                                             strict=True) if n]  # fmt: skip
    return float(np.mean(returns))


@pytest.mark.slow
def test_mappo_learns_simple_spread() -> None:
    """30,000 env steps with the MPE defaults (about a minute on a busy 2-core machine) take MAPPO
    clearly past a uniformly random policy on simple_spread_v3: the policy's own episodes in the
    last fifth of the run, and its greedy evaluation, return more than the random policy does on
    the evaluation episodes (-26.9 per agent; doing nothing scores about -23.6)."""
    spec = spec_for(
        "mappo", 30_000,
        env={"suite": "mpe", "id": "simple_spread_v3", "num_envs": 8},
        hyperparameters=None,
        evaluation={"every_steps": 30_000, "episodes": 48},
        checkpoint={"every_steps": 30_000},
    )  # fmt: skip
    hooks = MemoryHooks()
    train(spec, hooks)
    eval_env = make_vec_env(spec.env, rng.derive_seed(spec.seed, "eval"), num_envs=MAX_EVAL_ENVS)
    random = random_policy_return(eval_env, 48, 0)
    eval_env.close()
    returns = [v for _, v in hooks.series("train/episode_return")]
    fifth = len(returns) // 5
    first, last = float(np.mean(returns[:fifth])), float(np.mean(returns[-fifth:]))
    greedy = hooks.series("eval/episode_return")[-1][1]
    assert last > first + 2.0, (first, last)
    assert last > random + 3.0, (last, random)
    assert greedy > random + 2.0, (greedy, random)
