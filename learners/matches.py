"""Matches: one team's policy against another's on a mixed cooperative-competitive MPE scenario.

``play_match`` seats each team of the scenario with a policy, a checkpoint of some run or uniform
random actions, plays whole episodes with every policy acting greedily, and scores them twice:

- each team's **return**, defined as in training (``learners.envs.teams``): per episode, the mean
  over the team's agents of each agent's undiscounted return, so a match's number is comparable to
  a run's ``eval/episode_return/<team>`` curve; reported as the mean over episodes with a 95%
  Student-t confidence interval of that mean;
- the scenario's **natural score** (``learners.envs.scores``), read from the mpe2 world state
  (positions and sizes) after every step, the state the step's rewards are computed from:
  collisions per episode on simple_tag, distances to the goal landmark on simple_adversary and
  simple_push; the match's score is its mean over the episodes.

A checkpoint must fit its team's seats (``learners.admission.match_fit.fit_errors``, which the API
calls at submission); this module imports no deep-learning framework until a match is played.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import numpy as np
from numpy.typing import NDArray

from learners import rng
from learners.admission.match_fit import fit_errors
from learners.enums import EnvEngine, EnvSuite
from learners.envs.base import EnvInfo, Observation
from learners.envs.catalogue import scenario_teams
from learners.envs.factory import make_vec_env
from learners.envs.scores import Scorer
from learners.envs.suites.mpe import CLASSIC_MPE_ENVS
from learners.envs.teams import team_members, team_returns

if TYPE_CHECKING:
    from learners.envs.mpe import MPEVecEnv
    from learners.policy import Policy
    from learners.spec import EnvSpec

RANDOM: Final = "random"
TeamPolicy = Path | Literal["random"]
"""A checkpoint file on local disk, or uniform random actions."""
# Copies stepped together: enough to batch the policies' forward passes, few enough that a short
# match does not build envs it never uses.
MAX_COPIES = 16


@dataclass(frozen=True)
class TeamScore:
    """One team's returns over a match's episodes."""

    mean_return: float
    """The mean over episodes of the team's episode return."""
    ci95: tuple[float, float]
    """The 95% Student-t interval of that mean; ``(mean, mean)`` from a single episode."""
    returns: tuple[float, ...]
    """Each episode's team return, in episode order."""


@dataclass(frozen=True)
class MatchResult:
    """What a match found."""

    episodes: int
    teams: dict[str, TeamScore]
    score: dict[str, float]
    """The scenario's natural score (empty for a scenario without one)."""
    replay_steps: int | None
    """Frames rendered into the replay GIF, one per step of its episode, when one was written (the
    file may hold fewer: identical consecutive frames are stored as one that lasts longer)."""

    def as_json(self) -> dict[str, Any]:
        """The stored result: means and intervals, without the per-episode lists."""
        return {
            "episodes": self.episodes,
            "teams": {
                team: {"mean_return": s.mean_return, "ci95": list(s.ci95)}
                for team, s in self.teams.items()
            },
            "score": dict(self.score),
        }


# ---------------------------------------------------------------------------------------------
# Playing


class _Seating:
    """Acts for every seat of an env: each team's seats take its policy's actions. A random team
    draws from one generator per copy, so copy 0 plays the same episode whatever the batch."""

    def __init__(
        self,
        info: EnvInfo,
        policies: Mapping[str, Policy | None],
        seed: int,
        stream: str,
        copies: int,
    ) -> None:
        self._info = info
        self._members = team_members(info.teams)
        self._policies = policies
        self._random = {
            team: [rng.generator(seed, f"{stream}/{team}/{i}") for i in range(copies)]
            for team, policy in policies.items()
            if policy is None
        }

    def act(self, obs: Observation) -> NDArray[Any]:
        copies, info = obs.obs.shape[0], self._info
        discrete = info.action_kind == "discrete"
        shape = (
            (copies, info.num_agents) if discrete else (copies, info.num_agents, info.action_dim)
        )
        actions = np.zeros(shape, np.int64 if discrete else np.float32)
        acted: dict[int, NDArray[Any]] = {}
        for team, policy in self._policies.items():
            seats = self._members[team]
            if policy is None:
                actions[:, seats] = self._draw(self._random[team], len(seats))
                continue
            # One forward pass per policy, however many teams it plays for (self-play).
            if id(policy) not in acted:
                acted[id(policy)] = policy.act(obs)
            actions[:, seats] = acted[id(policy)][:, seats]
        return actions

    def _draw(self, generators: list[np.random.Generator], seats: int) -> NDArray[Any]:
        info = self._info
        if info.action_kind == "discrete":
            picks: NDArray[np.int64] = np.stack(
                [g.integers(0, info.action_dim, seats) for g in generators]
            )
            return picks
        draws = [g.uniform(-1.0, 1.0, (seats, info.action_dim)) for g in generators]
        uniform: NDArray[np.float32] = np.stack(draws).astype(np.float32)
        return uniform

    def end_episodes(self, ended: NDArray[np.bool_]) -> None:
        for policy in {id(p): p for p in self._policies.values() if p is not None}.values():
            policy.end_episodes(ended)


MATCH_SCENARIOS: tuple[str, ...] = CLASSIC_MPE_ENVS
"""The mpe2 scenarios matches are played and scored on (those with opposing teams are
competitive; ``learners.envs.scores`` reads their world state)."""


def _check_teams(env: EnvSpec, teams: Mapping[str, TeamPolicy]) -> None:
    if env.suite != EnvSuite.MPE or env.id not in MATCH_SCENARIOS:
        scenarios = ", ".join(MATCH_SCENARIOS)
        raise ValueError(f"matches are played on the mpe scenarios {scenarios}, not on {env.id}")
    expected = scenario_teams(env.suite, env.id)
    missing = [t for t in expected if t not in teams]
    unknown = [t for t in teams if t not in expected]
    if missing or unknown:
        problems = [f"no policy for {', '.join(missing)}"] if missing else []
        problems += [f"no team {', '.join(unknown)} in {env.id}"] if unknown else []
        raise ValueError(
            f"a match gives every team of {env.id} ({', '.join(expected)}) exactly one policy: "
            + "; ".join(problems)
        )


def _load_policies(env: EnvSpec, teams: Mapping[str, TeamPolicy]) -> dict[str, Policy | None]:
    """Each team's policy (None: random), every checkpoint checked against its seats first and
    loaded once however many teams it plays."""
    from learners.checkpoint import read_manifest
    from learners.policy import load_policy
    from learners.replay import installed_backend
    from learners.spec import ExperimentSpec

    loaded: dict[Path, Policy] = {}
    out: dict[str, Policy | None] = {}
    for team, choice in teams.items():
        if choice == RANDOM:
            out[team] = None
            continue
        path = Path(choice)
        trained = ExperimentSpec.model_validate(read_manifest(path).spec).env
        errors = fit_errors(env, team, trained)
        if errors:
            raise ValueError(f"the checkpoint for team '{team}' does not fit: {'; '.join(errors)}")
        if path not in loaded:
            loaded[path] = load_policy(path, backend=installed_backend(path))
        out[team] = loaded[path]
    return out


def _team_score(returns: list[float]) -> TeamScore:
    values = np.asarray(returns, np.float64)
    mean = float(values.mean())
    spread = float(values.std(ddof=1)) if len(values) > 1 else 0.0
    if spread == 0.0 or not math.isfinite(spread):
        return TeamScore(mean, (mean, mean), tuple(returns))
    from scipy import stats

    low, high = stats.t.interval(
        0.95, len(values) - 1, loc=mean, scale=spread / math.sqrt(len(values))
    )
    return TeamScore(mean, (float(low), float(high)), tuple(returns))


def play_match(
    env: EnvSpec,
    teams: Mapping[str, TeamPolicy],
    *,
    episodes: int,
    seed: int,
    replay_to: Path | None = None,
) -> MatchResult:
    """Play ``episodes`` whole episodes of ``env`` (an mpe scenario) with each team's seats acting
    by its policy: a checkpoint's greedy policy (loaded by an installed backend that can) or
    uniform random actions. Every team of the scenario must be given exactly once, and each
    checkpoint must fit its team's seats (``fit_errors``): ValueError otherwise.

    Episode ``k`` of the match is episode ``k // C`` of copy ``k % C`` (``C`` copies stepped in
    process, at most ``MAX_COPIES``), seeded from ``seed``; the same inputs give the same result.
    With ``replay_to``, episode 0 is played again on a rendering copy and written there as a GIF.
    """
    from learners.envs.mpe import MPEVecEnv

    if episodes < 1:
        raise ValueError(f"a match plays at least one episode, not {episodes}")
    _check_teams(env, teams)
    policies = _load_policies(env, teams)
    env_seed = rng.derive_seed(seed, "match")
    copies = min(episodes, MAX_COPIES)
    # Scored from mpe2's world state (``Scorer``), whatever engine the policies trained on: the
    # vector engine equals mpe2, so a policy plays the same there.
    env = env.model_copy(update={"engine": EnvEngine.MPE2})
    vec = make_vec_env(env, env_seed, num_envs=copies, workers=0)
    try:
        assert isinstance(vec, MPEVecEnv)  # workers=0 on the mpe suite
        seating = _Seating(vec.info, policies, seed, "match/random", copies)
        scorer = Scorer(env.id, copies)
        vec.step_observer = scorer.observe
        returns = _play(vec, seating, scorer, episodes)
    finally:
        vec.close()
    replay_steps = None
    if replay_to is not None:
        replay_steps = _replay(env, env_seed, policies, seed, replay_to)
    return MatchResult(
        episodes=episodes,
        teams={team: _team_score(values) for team, values in returns.items()},
        score=scorer.score(),
        replay_steps=replay_steps,
    )


def _play(
    vec: MPEVecEnv, seating: _Seating, scorer: Scorer, episodes: int
) -> dict[str, list[float]]:
    """Each team's return in each match episode, in episode order."""
    copies = vec.info.num_envs
    members = team_members(vec.info.teams)
    quota = np.array([len(range(i, episodes, copies)) for i in range(copies)])
    played = np.zeros(copies, np.int64)
    by_episode: dict[int, dict[str, float]] = {}
    seating.end_episodes(np.ones(copies, np.bool_))
    obs = vec.reset(episode_index=np.zeros(copies, np.int64))
    while (played < quota).any():
        obs, transition = vec.step(seating.act(obs))
        ended = transition.episode_lengths > 0
        seating.end_episodes(ended)
        for i in np.flatnonzero(ended):
            episode = int(i + played[i] * copies) if played[i] < quota[i] else None
            scorer.end(int(i), episode)
            if episode is not None:
                by_episode[episode] = team_returns(members, transition.agent_returns[i])
                played[i] += 1
    ordered = [by_episode[k] for k in range(episodes)]
    return {team: [e[team] for e in ordered] for team in members}


def _replay(
    env: EnvSpec,
    env_seed: int,
    policies: Mapping[str, Policy | None],
    seed: int,
    out: Path,
) -> int:
    """Render the match's episode 0 to ``out``; the number of frames written."""
    from learners.replay import play_episode, write_gif

    vec = make_vec_env(env, env_seed, num_envs=1, render=True)
    try:
        seating = _Seating(vec.info, policies, seed, "match/random", 1)
        seating.end_episodes(np.ones(1, np.bool_))
        frames, _ = play_episode(vec, seating.act)
    finally:
        vec.close()
    write_gif(frames, out)
    return len(frames)
