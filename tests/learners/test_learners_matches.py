"""Matches (``learners.matches``): which checkpoints fit which seats, and matches played on real
mpe2 scenarios whose team returns and natural scores are held to oracles computed straight from
mpe2's own reward dicts over the same episodes and actions, with real (tiny) MADDPG checkpoints."""

from __future__ import annotations

import dataclasses
import importlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray
from PIL import Image
from scipy import stats

from learners import matches, rng
from learners.admission import match_fit
from learners.admission.match_fit import fit_errors
from learners.admission.parse import parse_spec
from learners.enums import EnvSuite
from learners.envs.base import EnvInfo, Observation, episode_seed
from learners.envs.mpe import MPEVecEnv, scenario_info
from learners.hooks import MemoryHooks
from learners.matches import RANDOM, MatchResult, play_match
from learners.policy import load_policy
from learners.spec import EnvSpec
from learners.training import train

TAG = {"max_cycles": 10}


def mpe(env_id: str, **kwargs: Any) -> EnvSpec:
    return EnvSpec(suite=EnvSuite.MPE, id=env_id, kwargs=kwargs)


def test_importing_matches_loads_no_deep_learning_framework() -> None:
    code = (
        "import learners.matches, sys; "
        "assert not {'torch', 'tensorflow', 'mindspore'} & set(sys.modules), sys.modules.keys()"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------------------------------------
# fit_errors


@pytest.mark.parametrize(
    ("trained", "team", "expected"),
    [
        (mpe("simple_adversary_v3"), "agent", "trained on simple_adversary_v3, not simple_tag_v3"),
        (mpe("simple_tag_v3"), "x", "the scenario has no team 'x' (its teams: adversary, agent)"),
        (mpe("simple_tag_v3", num_good=3), "adversary", "trained with 6 agents, the match has 4"),
        (mpe("simple_tag_v3", num_adversaries=2), "adversary", "'adversary' had 2 agents in"),
        (
            mpe("simple_tag_v3", num_obstacles=3),
            "agent",
            "observation size 16 in training, 14 here",
        ),
        (
            mpe("simple_tag_v3", continuous_actions=True),
            "agent",
            "continuous actions in training, discrete here",
        ),
    ],
)
def test_fit_errors_name_the_mismatch(trained: EnvSpec, team: str, expected: str) -> None:
    errors = fit_errors(mpe("simple_tag_v3"), team, trained)
    assert any(expected in e for e in errors), errors


def test_fit_errors_name_an_action_size_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    # No catalogued scenario changes its action size with its kwargs, so one env's sizes are faked.
    real = match_fit._scenario_info

    def sizes(env_id: str, kwargs_json: str) -> EnvInfo:
        info = real(env_id, kwargs_json)
        return dataclasses.replace(info, action_dim=2) if "max_cycles" in kwargs_json else info

    monkeypatch.setattr(match_fit, "_scenario_info", sizes)
    errors = fit_errors(mpe("simple_tag_v3", max_cycles=5), "agent", mpe("simple_tag_v3"))
    assert errors == ["action size 5 vs 2"]


def test_a_policy_fits_the_seats_of_its_own_env_whatever_the_episode_length() -> None:
    trained = mpe("simple_tag_v3", num_good=2, continuous_actions=True)
    for team in ("adversary", "agent"):
        assert fit_errors(trained, team, trained) == []
        match = mpe("simple_tag_v3", num_good=2, continuous_actions=True, max_cycles=50)
        assert fit_errors(match, team, trained) == []


# ---------------------------------------------------------------------------------------------
# Oracles: the same episodes played straight on mpe2


class Recorder:
    """Every batched env's reset/step: the observation each act saw and the actions it gave."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.observations: list[Observation] = []
        self.actions: list[NDArray[Any]] = []
        reset, step = MPEVecEnv.reset, MPEVecEnv.step
        recorder = self

        def recording_reset(env: MPEVecEnv, *args: Any, **kwargs: Any) -> Observation:
            obs = reset(env, *args, **kwargs)
            recorder.observations = [dataclasses.replace(obs, obs=obs.obs.copy())]
            recorder.actions = []
            return obs

        def recording_step(env: MPEVecEnv, actions: NDArray[Any]) -> Any:
            recorder.actions.append(np.array(actions, copy=True))
            obs, transition = step(env, actions)
            recorder.observations.append(dataclasses.replace(obs, obs=obs.obs.copy()))
            return obs, transition

        monkeypatch.setattr(MPEVecEnv, "reset", recording_reset)
        monkeypatch.setattr(MPEVecEnv, "step", recording_step)


def natural_score(env_id: str, rewards: dict[str, float]) -> dict[str, float]:
    """One step's natural score derived from the scenario's unshaped rewards (mpe2's reward code):
    simple_tag pays each adversary 10 per adversary-prey pair in contact; simple_adversary pays the
    adversary minus its distance to the goal and the good agents that distance minus the closest
    good agent's; simple_push pays the good agent minus its distance and the adversary that
    distance minus its own."""
    if env_id == "simple_tag_v3":
        return {"collisions_per_episode": rewards["adversary_0"] / 10}
    if env_id == "simple_adversary_v3":
        adversary = -rewards["adversary_0"]
        return {
            "adversary_distance_to_goal": adversary,
            "agents_distance_to_goal": adversary - rewards["agent_0"],
        }
    agent = -rewards["agent_0"]
    return {
        "agent_distance_to_goal": agent,
        "adversary_distance_to_goal": agent - rewards["adversary_0"],
    }


def oracle(
    env: EnvSpec, seed: int, episodes: int, actions: list[NDArray[Any]]
) -> tuple[list[NDArray[np.float64]], dict[str, float]]:
    """Each match episode's per-agent returns, and the match's natural score, from episodes played
    on fresh mpe2 envs with the match's episode seeds and the actions the match's env was given."""
    copies = actions[0].shape[0]
    seed = rng.derive_seed(seed, "match")
    kept: dict[int, tuple[NDArray[np.float64], dict[str, float]]] = {}
    for copy in range(copies):
        raw = importlib.import_module(f"mpe2.{env.id}").parallel_env(**env.kwargs)
        agents, local = raw.possible_agents, 0
        raw.reset(seed=episode_seed(seed, copy, local))
        total, scores, steps = np.zeros(len(agents)), {}, 0
        for step_actions in actions:
            act = step_actions[copy]
            if act.ndim == 2:  # continuous: [-1, 1] onto Box(0, 1), in float32 as the adapter does
                act = np.clip(act, -1, 1) * np.float32(0.5) + np.float32(0.5)
                given = {a: act[j] for j, a in enumerate(agents)}
            else:
                given = {a: int(act[j]) for j, a in enumerate(agents)}
            _, rewards, _, _, _ = raw.step(given)
            total += [rewards[a] for a in agents]
            for name, value in natural_score(env.id, rewards).items():
                scores[name] = scores.get(name, 0.0) + value
            steps += 1
            if not raw.agents:
                if env.id != "simple_tag_v3":
                    scores = {k: v / steps for k, v in scores.items()}
                kept[copy + local * copies] = (total, scores)
                local += 1
                raw.reset(seed=episode_seed(seed, copy, local))
                total, scores, steps = np.zeros(len(agents)), {}, 0
        raw.close()
    returns = [kept[k][0] for k in range(episodes)]
    names = kept[0][1]
    return returns, {n: float(np.mean([kept[k][1][n] for k in range(episodes)])) for n in names}


def team_index(env: EnvSpec, team: str) -> list[int]:
    info = scenario_info(env.id, dict(env.kwargs))
    return [j for j, t in enumerate(info.teams) if t == team]


@pytest.mark.parametrize(
    "env",
    [
        mpe("simple_tag_v3", max_cycles=25, num_good=2, num_adversaries=4),
        mpe("simple_adversary_v3", max_cycles=8),
        mpe("simple_push_v3", max_cycles=8, continuous_actions=True),
    ],
    ids=lambda e: e.id,
)
def test_team_returns_and_natural_score_match_mpe2s_own_rewards(
    env: EnvSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two copies for five episodes: copy 0 plays three, copy 1 two and a third that is not counted.
    monkeypatch.setattr(matches, "MAX_COPIES", 2)
    recorder = Recorder(monkeypatch)
    result = play_match(env, {"adversary": RANDOM, "agent": RANDOM}, episodes=5, seed=11)

    returns, score = oracle(env, 11, 5, recorder.actions)
    assert result.episodes == 5 and set(result.teams) == {"adversary", "agent"}
    for team in ("adversary", "agent"):
        expected = [float(r[team_index(env, team)].mean()) for r in returns]
        np.testing.assert_allclose(result.teams[team].returns, expected, rtol=1e-5, atol=1e-5)
        assert result.teams[team].mean_return == pytest.approx(np.mean(expected), rel=1e-5)
    assert set(result.score) == set(score)
    for name, value in score.items():
        assert result.score[name] == pytest.approx(value, rel=1e-6, abs=1e-9), name
    if env.id == "simple_tag_v3":
        assert result.score["collisions_per_episode"] > 0, "a degenerate oracle: nobody was caught"


def test_the_interval_is_students_t_of_the_mean() -> None:
    result = play_match(
        mpe("simple_tag_v3", **TAG), {"adversary": RANDOM, "agent": RANDOM}, episodes=6, seed=2
    )
    values = np.array(result.teams["agent"].returns)
    half = stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values))
    low, high = result.teams["agent"].ci95
    assert low == pytest.approx(values.mean() - half) and high == pytest.approx(
        values.mean() + half
    )
    assert low < result.teams["agent"].mean_return < high

    one = play_match(
        mpe("simple_tag_v3", **TAG), {"adversary": RANDOM, "agent": RANDOM}, episodes=1, seed=2
    )
    mean = one.teams["agent"].mean_return
    assert one.teams["agent"].ci95 == (mean, mean) and one.teams["agent"].returns == (mean,)


def test_a_match_is_deterministic_in_its_seed() -> None:
    env = mpe("simple_adversary_v3", max_cycles=10, continuous_actions=True)
    teams = {"adversary": RANDOM, "agent": RANDOM}
    first = play_match(env, teams, episodes=3, seed=5)
    again = play_match(env, teams, episodes=3, seed=5)
    other = play_match(env, teams, episodes=3, seed=6)
    assert first == again
    assert other.teams["agent"].returns != first.teams["agent"].returns


def test_a_cooperative_scenario_is_one_team_without_a_score() -> None:
    result = play_match(
        mpe("simple_spread_v3", max_cycles=5), {"agent": RANDOM}, episodes=2, seed=0
    )
    assert set(result.teams) == {"agent"} and result.score == {}
    assert result.as_json()["teams"]["agent"]["ci95"] == list(result.teams["agent"].ci95)


@pytest.mark.parametrize(
    ("teams", "match"),
    [
        ({"adversary": RANDOM}, "no policy for agent"),
        ({"adversary": RANDOM, "agent": RANDOM, "prey": RANDOM}, "no team prey"),
        ({}, "no policy for adversary, agent"),
    ],
)
def test_every_team_is_given_exactly_once(teams: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        play_match(mpe("simple_tag_v3", **TAG), teams, episodes=1, seed=0)


def test_a_match_needs_an_mpe_scenario_and_an_episode() -> None:
    with pytest.raises(ValueError, match="mpe"):
        play_match(
            EnvSpec(suite=EnvSuite.GYMNASIUM, id="Pendulum-v1"),
            {"agent": RANDOM},
            episodes=1,
            seed=0,
        )
    with pytest.raises(ValueError, match="at least one episode"):
        play_match(mpe("simple_tag_v3"), {"adversary": RANDOM, "agent": RANDOM}, episodes=0, seed=0)


# ---------------------------------------------------------------------------------------------
# Real checkpoints


@pytest.fixture(scope="module")
def tag_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A MADDPG (torch, one hidden layer of 16) trained 200 steps on simple_tag, continuous."""
    folder = tmp_path_factory.mktemp("tag")
    spec = parse_spec(
        {
            "name": "matches",
            "algorithm": "maddpg",
            "backend": "torch",
            "env": {
                "suite": "mpe",
                "id": "simple_tag_v3",
                "num_envs": 2,
                "kwargs": {**TAG, "continuous_actions": True},
            },
            "total_steps": 200,
            "seed": 3,
            "device": "cpu",
            "hyperparameters": {"hidden_sizes": [16], "batch_size": 16, "learning_starts": 100},
            "evaluation": {"every_steps": 200, "episodes": 1},
            "checkpoint": {"every_steps": 200, "keep_last": 1},
        }
    )
    hooks = MemoryHooks(checkpoint_dir=folder)
    train(spec, hooks)
    path = hooks.checkpoints[-1][1]
    assert path is not None
    yield path


def test_a_checkpoint_plays_its_team_against_random(
    tag_checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = mpe("simple_tag_v3", **TAG, continuous_actions=True)
    recorder = Recorder(monkeypatch)
    result = play_match(env, {"adversary": tag_checkpoint, "agent": RANDOM}, episodes=3, seed=1)

    # The adversaries' seats took the policy's greedy actions; the good agent's did not.
    policy = load_policy(tag_checkpoint)
    adversaries, agent = team_index(env, "adversary"), team_index(env, "agent")
    for obs, actions in zip(recorder.observations, recorder.actions, strict=False):
        greedy = policy.act(obs)
        np.testing.assert_allclose(actions[:, adversaries], greedy[:, adversaries], atol=1e-6)
        assert not np.allclose(actions[:, agent], greedy[:, agent])
    returns, score = oracle(env, 1, 3, recorder.actions)
    expected = [float(r[adversaries].mean()) for r in returns]
    np.testing.assert_allclose(result.teams["adversary"].returns, expected, rtol=1e-5, atol=1e-5)
    assert result.score["collisions_per_episode"] == pytest.approx(score["collisions_per_episode"])


def test_a_checkpoint_can_play_both_teams_deterministically(tag_checkpoint: Path) -> None:
    env = mpe("simple_tag_v3", **TAG, continuous_actions=True)
    teams = {"adversary": tag_checkpoint, "agent": tag_checkpoint}
    first = play_match(env, teams, episodes=2, seed=4)
    assert first == play_match(env, teams, episodes=2, seed=4)
    assert first != play_match(env, teams, episodes=2, seed=5)


def test_a_checkpoint_that_does_not_fit_is_refused_naming_the_team(tag_checkpoint: Path) -> None:
    env = mpe("simple_tag_v3", **TAG, continuous_actions=True, num_good=2)
    with pytest.raises(
        ValueError, match="team 'adversary'.*trained with 4 agents, the match has 5"
    ):
        play_match(env, {"adversary": tag_checkpoint, "agent": RANDOM}, episodes=1, seed=0)
    discrete = mpe("simple_tag_v3", **TAG)
    with pytest.raises(ValueError, match="team 'agent'.*continuous actions in training, discrete"):
        play_match(discrete, {"adversary": RANDOM, "agent": tag_checkpoint}, episodes=1, seed=0)


def test_a_replay_of_the_first_episode_is_written(tag_checkpoint: Path, tmp_path: Path) -> None:
    env = mpe("simple_tag_v3", **TAG, continuous_actions=True)
    out = tmp_path / "match.gif"
    result = play_match(
        env, {"adversary": tag_checkpoint, "agent": RANDOM}, episodes=2, seed=0, replay_to=out
    )
    gif = Image.open(out)
    assert gif.format == "GIF"
    # One frame per step of the episode; PIL stores identical consecutive frames as one.
    assert result.replay_steps == TAG["max_cycles"] and 1 < gif.n_frames <= result.replay_steps
    assert isinstance(result, MatchResult) and "replay_steps" not in result.as_json()


def test_a_recurrent_policy_starts_every_episode_afresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = parse_spec(
        {
            "name": "matches",
            "algorithm": "wqmix",
            "backend": "torch",
            "env": {
                "suite": "mpe",
                "id": "simple_spread_v3",
                "num_envs": 2,
                "kwargs": {"max_cycles": 5},
            },
            "total_steps": 120,
            "seed": 3,
            "device": "cpu",
            "hyperparameters": {
                "hidden_sizes": [16],
                "rnn_hidden_size": 8,
                "learning_starts": 100,
                "recurrent": True,
                "episode_batch_size": 4,
                "episode_buffer_size": 10,
            },  # fmt: skip
            "evaluation": {"every_steps": 120, "episodes": 1},
            "checkpoint": {"every_steps": 120, "keep_last": 1},
        }
    )
    hooks = MemoryHooks(checkpoint_dir=tmp_path)
    train(spec, hooks)
    path = hooks.checkpoints[-1][1]
    assert path is not None
    # One copy plays the three episodes one after another.
    monkeypatch.setattr(matches, "MAX_COPIES", 1)
    result = play_match(spec.env, {"agent": path}, episodes=3, seed=0)

    # Each episode played alone by a freshly loaded policy gives the same return.
    for k, played in enumerate(result.teams["agent"].returns):
        policy = load_policy(path)
        env = MPEVecEnv("simple_spread_v3", {"max_cycles": 5}, 1, seed=rng.derive_seed(0, "match"))
        obs = env.reset(episode_index=np.array([k]))
        while True:
            obs, transition = env.step(policy.act(obs))
            if transition.episode_lengths[0]:
                break
        env.close()
        assert played == pytest.approx(float(transition.agent_returns[0].mean()), rel=1e-6)
