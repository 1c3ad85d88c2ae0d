"""Whether a checkpoint's policy can take a team's seats in a match's env, decided without
building networks (the API calls ``fit_errors`` when a match is submitted): a checkpoint's policy
acts for every agent of the env it was trained on, so the match's env must seat as many agents,
the team as many, with the same observation and action sizes."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

from learners.enums import EnvSuite
from learners.envs.base import EnvInfo
from learners.envs.catalogue import env_shape, scenario_teams, suite
from learners.envs.suites.mpe import CLASSIC_MPE_ENVS
from learners.spec import EnvSpec


@dataclass(frozen=True)
class Seats:
    """What a policy acting for every agent of an env is shaped by."""

    teams: tuple[str, ...]
    obs_dims: tuple[int, ...]
    obs_dim: int
    discrete: bool
    action_dim: int


def seats(env: EnvSpec) -> Seats:
    if env.suite == EnvSuite.MPE and env.id in CLASSIC_MPE_ENVS:
        info = _scenario_info(env.id, json.dumps(dict(env.kwargs), sort_keys=True))
        return Seats(
            info.teams,
            info.obs_dims,
            info.obs_dim,
            info.action_kind == "discrete",
            info.action_dim,
        )
    shape = env_shape(env.suite, env.id, env.kwargs)
    teams = suite(env.suite).teams(env.id, env.kwargs)
    if len(teams) != shape.num_agents:
        teams = ("agent",) * shape.num_agents
    return Seats(
        teams, (shape.obs_dim,) * shape.num_agents, shape.obs_dim, shape.discrete, shape.action_dim
    )


@functools.lru_cache(maxsize=64)
def _scenario_info(env_id: str, kwargs_json: str) -> EnvInfo:
    from learners.envs.mpe import scenario_info

    return scenario_info(env_id, json.loads(kwargs_json))


def _kind(discrete: bool) -> str:
    return "discrete" if discrete else "continuous"


def fit_errors(match_env: EnvSpec, team: str, trained_env: EnvSpec) -> list[str]:
    """Why a policy trained on ``trained_env`` cannot take ``team``'s seats in ``match_env``; ``[]``
    when it fits. A checkpoint's policy acts for every agent of the env it was trained on, so the
    match's env must have as many agents, the team as many seats, and the same observation and
    action sizes. Builds one throwaway copy of each mpe2 env (no network); raises what the env's
    constructor raises for kwargs it refuses."""
    if (trained_env.suite, trained_env.id) != (match_env.suite, match_env.id):
        return [f"trained on {trained_env.id}, not {match_env.id}"]
    teams = scenario_teams(match_env.suite, match_env.id)
    if team not in teams:
        return [f"the scenario has no team '{team}' (its teams: {', '.join(teams)})"]
    trained, here = seats(trained_env), seats(match_env)
    errors: list[str] = []
    if len(trained.teams) != len(here.teams):
        errors.append(f"trained with {len(trained.teams)} agents, the match has {len(here.teams)}")
    seats_trained, seats_here = trained.teams.count(team), here.teams.count(team)
    if seats_trained != seats_here:
        errors.append(f"team '{team}' had {seats_trained} agents in training, {seats_here} here")
    if trained.discrete != here.discrete:
        errors.append(f"{_kind(trained.discrete)} actions in training, {_kind(here.discrete)} here")
    elif trained.action_dim != here.action_dim:
        errors.append(f"action size {trained.action_dim} vs {here.action_dim}")
    errors += _obs_errors(team, trained, here)
    return errors


def _obs_errors(team: str, trained: Seats, here: Seats) -> list[str]:
    dims_trained = {d for d, t in zip(trained.obs_dims, trained.teams, strict=True) if t == team}
    dims_here = {d for d, t in zip(here.obs_dims, here.teams, strict=True) if t == team}
    if dims_trained != dims_here:
        return [f"observation size {_sizes(dims_trained)} in training, {_sizes(dims_here)} here"]
    if trained.obs_dim != here.obs_dim:
        # The network's input is padded to the largest agent's observation.
        return [f"padded observation size {trained.obs_dim} in training, {here.obs_dim} here"]
    return []


def _sizes(dims: set[int]) -> str:
    return " and ".join(str(d) for d in sorted(dims))
