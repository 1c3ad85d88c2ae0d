"""Per-team returns on real mpe2 scenarios: each agent's return and each team's mean match an oracle
summed from the env's own reward dicts, ``train/episode_return`` keeps its meaning (the mean over
every agent), a one-team env reports no team series, and a training run in every backend reports
``train/`` and ``eval/episode_return/<team>``."""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
from numpy.typing import NDArray

from learners import checkpoint
from learners.enums import Algorithm, Backend
from learners.envs.base import Observation, episode_seed
from learners.envs.mpe import MPEVecEnv
from learners.hooks import MemoryHooks
from learners.registry import entry
from learners.runners.base import Reporter, RunContext, evaluate
from learners.spec import ExperimentSpec
from learners.training import train

SEED = 7


def raw_returns(
    env_id: str, kwargs: dict[str, Any], copy: int, actions: list[NDArray[Any]]
) -> list[NDArray[np.float64]]:
    """Each ended episode's per-agent returns in copy ``copy``, played straight on mpe2 with the
    episode seeds and the discrete ``actions`` ((N,) per step) the adapter was given."""
    env = importlib.import_module(f"mpe2.{env_id}").parallel_env(**kwargs)
    agents = env.possible_agents
    episode, total = 0, np.zeros(len(agents))
    ended: list[NDArray[np.float64]] = []
    env.reset(seed=episode_seed(SEED, copy, episode))
    for action in actions:
        _, rewards, _, _, _ = env.step({a: int(action[j]) for j, a in enumerate(agents)})
        total += [rewards[a] for a in agents]
        if not env.agents:
            ended.append(total)
            episode, total = episode + 1, np.zeros(len(agents))
            env.reset(seed=episode_seed(SEED, copy, episode))
    env.close()
    return ended


class RandomActor:
    """Uniform discrete actions, each step's kept for the oracle."""

    def __init__(self, num_agents: int) -> None:
        self.rng = np.random.default_rng(0)
        self.num_agents = num_agents
        self.taken: list[NDArray[np.int64]] = []

    def act(self, obs: Observation, explore: bool = True) -> NDArray[np.int64]:
        actions = self.rng.integers(0, 5, (obs.obs.shape[0], self.num_agents))
        self.taken.append(actions)
        return actions


# (env id, kwargs, steps): two or three whole episodes per copy. simple_tag with four adversaries
# and two good agents: the adversaries catch someone in these episodes, and the good agents' own
# returns differ (each pays for its own capture and its own straying), so a team's mean is tested.
CASES = [
    ("simple_tag_v3", {"max_cycles": 25, "num_good": 2, "num_adversaries": 4}, 50),
    ("simple_adversary_v3", {"max_cycles": 5}, 17),
]


@pytest.mark.parametrize(("env_id", "kwargs", "steps"), CASES, ids=[c[0] for c in CASES])
def test_agent_and_team_returns_match_the_raw_rewards(
    env_id: str, kwargs: dict[str, Any], steps: int
) -> None:
    env = MPEVecEnv(env_id, kwargs, 2, seed=SEED)
    actor = RandomActor(env.info.num_agents)
    hooks = MemoryHooks()
    reporter = Reporter(hooks, 0, env.info.teams)
    seen: list[list[NDArray[Any]]] = [[], []]
    obs = env.reset()
    for _ in range(steps):
        obs, transition = env.step(actor.act(obs))
        reporter.episodes(transition)
        for i in np.flatnonzero(transition.episode_lengths):
            seen[i].append(transition.agent_returns[i].copy())
            mean = transition.agent_returns[i].mean()
            assert transition.episode_returns[i] == pytest.approx(mean, rel=1e-5, abs=1e-5)
    env.close()
    reporter.flush(steps)

    oracle = [raw_returns(env_id, kwargs, i, [a[i] for a in actor.taken]) for i in range(2)]
    assert len(oracle[0]) == len(oracle[1]) == steps // kwargs["max_cycles"]
    for i in range(2):
        np.testing.assert_allclose(np.array(seen[i]), np.array(oracle[i]), rtol=1e-5, atol=1e-5)
    episodes = np.array(oracle[0] + oracle[1])
    adversaries = [j for j, a in enumerate(env.info.agent_ids) if a.startswith("adversary_")]
    good = [j for j, a in enumerate(env.info.agent_ids) if a.startswith("agent_")]
    assert episodes[:, adversaries].any() and episodes[:, good].any(), "a degenerate oracle"
    reported = {p.name: p.value for p in hooks.points}
    assert reported["train/episode_return/adversary"] == pytest.approx(
        episodes[:, adversaries].mean(axis=1).mean(), rel=1e-5
    )
    assert reported["train/episode_return/agent"] == pytest.approx(
        episodes[:, good].mean(axis=1).mean(), rel=1e-5
    )
    # Unchanged: the mean over every agent, averaged over the episodes.
    assert reported["train/episode_return"] == pytest.approx(episodes.mean(axis=1).mean(), rel=1e-5)
    assert reported["train/episode_length"] == kwargs["max_cycles"]


def test_evaluation_reports_each_teams_mean_return() -> None:
    env_id, kwargs = "simple_tag_v3", {"max_cycles": 4}
    eval_env = MPEVecEnv(env_id, kwargs, 2, seed=SEED)
    actor = RandomActor(eval_env.info.num_agents)
    ctx = types.SimpleNamespace(
        eval_env=eval_env,
        spec=types.SimpleNamespace(evaluation=types.SimpleNamespace(episodes=3)),
        learner=actor,
    )
    metrics = evaluate(cast(RunContext, ctx))
    eval_env.close()

    # Copy 0 plays episodes 0 and 2 of the evaluation, copy 1 episode 1.
    oracle = [raw_returns(env_id, kwargs, i, [a[i] for a in actor.taken]) for i in range(2)]
    episodes = np.array(oracle[0][:2] + oracle[1][:1])
    assert set(metrics) == {
        "eval/episode_return",
        "eval/episode_length",
        "eval/episode_return/adversary",
        "eval/episode_return/agent",
    }
    assert metrics["eval/episode_return/adversary"] == pytest.approx(
        episodes[:, :3].mean(), rel=1e-5
    )
    assert metrics["eval/episode_return/agent"] == pytest.approx(episodes[:, 3].mean(), rel=1e-5)
    assert metrics["eval/episode_return"] == pytest.approx(episodes.mean(), rel=1e-5)


def test_a_cooperative_scenario_gets_no_team_series() -> None:
    env = MPEVecEnv("simple_spread_v3", {"max_cycles": 3}, 2, seed=SEED)
    actor = RandomActor(env.info.num_agents)
    hooks = MemoryHooks()
    reporter = Reporter(hooks, 0, env.info.teams)
    obs = env.reset()
    for _ in range(6):
        obs, transition = env.step(actor.act(obs))
        reporter.episodes(transition)
    env.close()
    reporter.flush(6)
    names = {p.name for p in hooks.points}
    assert "train/episode_return" in names
    assert not [n for n in names if n.startswith("train/episode_return/")]


def _tag_spec(make_spec: Callable[..., ExperimentSpec], backend: Backend) -> ExperimentSpec:
    return make_spec(
        Algorithm.MADDPG,
        backend,
        env={"suite": "mpe", "id": "simple_tag_v3", "num_envs": 2, "kwargs": {"max_cycles": 10}},
        total_steps=200,
        hyperparameters={"hidden_sizes": [16], "batch_size": 16, "learning_starts": 100},
        evaluation={"every_steps": 100, "episodes": 2},
        checkpoint={"every_steps": 100, "keep_last": 3},
    )


@pytest.mark.parametrize("backend", sorted(entry(Algorithm.MADDPG).backends))
def test_training_reports_team_returns_in_every_backend(
    backend: Backend, make_spec: Callable[..., ExperimentSpec], hooks: MemoryHooks
) -> None:
    train(_tag_spec(make_spec, backend), hooks)
    for prefix in ("train", "eval"):
        overall = dict(hooks.series(f"{prefix}/episode_return"))
        adversary = dict(hooks.series(f"{prefix}/episode_return/adversary"))
        agent = dict(hooks.series(f"{prefix}/episode_return/agent"))
        assert overall and set(overall) == set(adversary) == set(agent), prefix
        # Three adversaries and one good agent: the mean over agents weighs the teams 3 to 1.
        for step, value in overall.items():
            assert value == pytest.approx((3 * adversary[step] + agent[step]) / 4, rel=1e-4)


def test_a_checkpoint_without_teams_resumes(
    make_spec: Callable[..., ExperimentSpec], hooks: MemoryHooks, tmp_path: Path
) -> None:
    spec = _tag_spec(make_spec, Backend.TORCH)
    train(spec, hooks)
    _, path = next((s, p) for s, p in hooks.checkpoints if s == 100)
    assert path is not None
    tensors, manifest = checkpoint.read(path)
    old_env = {k: v for k, v in manifest.env.items() if k != "teams"}
    old = tmp_path / "before-teams.safetensors"
    checkpoint.write(old, tensors, manifest.model_copy(update={"env": old_env}))

    resumed = MemoryHooks(tmp_path / "resumed")
    (tmp_path / "resumed").mkdir()
    train(spec, resumed, resume_from=old)
    assert resumed.checkpoints[-1][0] == 200
    assert resumed.series("train/episode_return/adversary")
