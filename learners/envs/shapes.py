"""The sizes a spec's environment will have, found without stepping it and without building
anything large: what the submission checks (``learners.admission.budget``) size buffers and
networks from.

Each suite works out its own (``Suite.sizes``). Gymnasium envs come from the table here (their
sizes are fixed; one kwarg adds a position feature), so checking a MuJoCo spec never loads MuJoCo.
An mpe2 scenario's sizes follow from its kwargs in ways each scenario spells out for itself
(partial observability pads observations, communication adds features), so rather than copy those
rules its suite builds one throwaway copy and reads it. That is cheap only for the sizes
``learners.admission.budget`` lets through (about 5 ms for 32 agents), so admission asks only
after the spec's counts passed those bounds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from learners.envs.base import EnvInfo
from learners.envs.teams import team_indices


@dataclass(frozen=True)
class EnvShape:
    """What the buffers and networks of a run are sized by: one copy of the env."""

    num_agents: int
    obs_dim: int
    """Padded per-agent observation size (the largest agent's)."""
    state_dim: int
    action_dim: int
    """Continuous: the action vector's size. Discrete: the number of actions."""
    discrete: bool
    max_episode_steps: int
    """The time limit: what an episode buffer pads every episode to."""
    team_sizes: tuple[int, ...] = ()
    """Agents per team, teams in the order their first agent appears; empty: one team of all
    (networks shared within a team are sized by it)."""
    group_sizes: tuple[int, ...] = ()
    """Agents per sharing set when a team's groups have networks of their own
    (``EnvInfo.sharing_sets``), sets in the order their first agent appears; empty: one set of
    all."""

    def set_sizes(self, across_groups: bool) -> tuple[int, ...]:
        """Agents per set of shared networks (empty: one set of all)."""
        return self.team_sizes if across_groups else self.group_sizes

    @classmethod
    def from_info(cls, info: EnvInfo) -> EnvShape:
        """The shape of a built env."""
        if info.max_episode_steps is None:
            raise ValueError("every catalogued env has a time limit")
        teams = tuple(len(team) for team in team_indices(info.teams))
        sets = info.sharing_sets(across_groups=False)
        groups = tuple(len(members) for members in team_indices(sets))
        return cls(
            num_agents=info.num_agents,
            obs_dim=info.obs_dim,
            state_dim=info.state_dim,
            action_dim=info.action_dim,
            discrete=info.action_kind == "discrete",
            max_episode_steps=info.max_episode_steps,
            team_sizes=teams if len(teams) > 1 else (),
            group_sizes=groups if len(groups) > 1 else (),
        )


@dataclass(frozen=True)
class _GymnasiumSizes:
    obs_dim: int
    action_dim: int
    max_episode_steps: int
    position_feature: bool
    """``exclude_current_positions_from_observation=false`` adds the torso's x position."""


# Checked against gymnasium.make by tests/learners/test_budget.py.
_GYMNASIUM: dict[str, _GymnasiumSizes] = {
    "Pendulum-v1": _GymnasiumSizes(3, 1, 200, position_feature=False),
    "HalfCheetah-v5": _GymnasiumSizes(17, 6, 1000, position_feature=True),
    "Hopper-v5": _GymnasiumSizes(11, 3, 1000, position_feature=True),
}


def gymnasium_shape(env_id: str, kwargs: Mapping[str, Any]) -> EnvShape:
    """The shape of a Gymnasium env of the table, from its kwargs."""
    sizes = _GYMNASIUM[env_id]
    extra = (
        sizes.position_feature and kwargs.get("exclude_current_positions_from_observation") is False
    )
    obs_dim = sizes.obs_dim + int(extra)
    return EnvShape(
        num_agents=1,
        obs_dim=obs_dim,
        state_dim=obs_dim,
        action_dim=sizes.action_dim,
        discrete=False,
        max_episode_steps=sizes.max_episode_steps,
    )
