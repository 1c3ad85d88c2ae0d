"""Teams: which agents play on the same side, and each team's return.

mpe2 names an agent ``<team>_<index>``: simple_adversary, simple_push and simple_tag put
``adversary_*`` against ``agent_*``, and the cooperative simple_spread has only ``agent_*``. The
team is the name without its index, so a Gymnasium env's one agent (``agent_0``) and every
cooperative scenario's agents are one team, ``agent``.

A team's return in one episode is the mean over its agents of each agent's undiscounted return:
what the team as a whole scored, comparable across team sizes (simple_tag's three adversaries share
one reward for a catch, so their mean is that reward).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

_INDEX = re.compile(r"_\d+$")


def team_of(agent_id: str) -> str:
    """The team of the agent named ``agent_id``: its name without the ``_<index>`` suffix."""
    return _INDEX.sub("", agent_id)


def teams_of(agent_ids: Iterable[str]) -> tuple[str, ...]:
    """Each agent's team, in the agents' order."""
    return tuple(team_of(a) for a in agent_ids)


def team_members(teams: Sequence[str]) -> dict[str, NDArray[np.intp]]:
    """Each team's agent indices (into the agent axis)."""
    agents = np.asarray(teams)
    return {name: np.flatnonzero(agents == name) for name in dict.fromkeys(teams)}


def team_indices(teams: Sequence[str]) -> tuple[tuple[int, ...], ...]:
    """Each team's agent indices as tuples, teams in the order their first agent appears."""
    return tuple(tuple(int(i) for i in index) for index in team_members(teams).values())


def team_slots(teams: Sequence[Sequence[int]]) -> tuple[tuple[int, int], ...]:
    """For each agent in agent order, (its team's index, its place in that team): where a network
    that runs team by team (``teams`` from ``team_indices``) finds each agent's row again."""
    where = {i: (k, j) for k, team in enumerate(teams) for j, i in enumerate(team)}
    return tuple(where[i] for i in range(len(where)))


def team_returns(
    members: dict[str, NDArray[np.intp]], agent_returns: NDArray[np.floating[Any]]
) -> dict[str, float]:
    """Each team's return in one episode: the mean over its agents of ``agent_returns`` ((N,), each
    agent's undiscounted return)."""
    return {name: float(np.mean(agent_returns[index])) for name, index in members.items()}


class TeamSeats(NamedTuple):
    """Where each agent sits when parameters are shared within each team, not across teams: the
    networks hold one set of weights per team, and an agent tells itself apart from its teammates
    by a one-hot of its place in the team, ``width`` wide (the largest team's size; a smaller
    team leaves the last columns unused)."""

    team: tuple[int, ...]
    """Each agent's team index (teams in the order their first agent appears)."""
    place: tuple[int, ...]
    """Each agent's place within its team."""

    @property
    def num_teams(self) -> int:
        return max(self.team) + 1

    @property
    def width(self) -> int:
        return max(self.place) + 1


def sharing_sets(
    teams: Sequence[str], groups: Sequence[str], *, across_groups: bool
) -> tuple[str, ...]:
    """Each agent's sharing set, in agent order: the agents whose networks it shares when
    parameters are shared. Never across teams; within a team, one set per group (agents of one
    group share observation and action spaces: simple_speaker_listener's speaker and listener
    each get their own networks) unless ``across_groups`` shares one set of networks among all
    the team's groups. ``groups`` empty (an env or manifest without groups): the teams. A set is
    named by its team where the team has one group, so an env whose teams are one group each
    has the same sets, in the same order, either way."""
    if across_groups or not groups:
        return tuple(teams)
    pairs = list(zip(teams, groups, strict=True))
    split = {team for team in teams if len({g for t, g in pairs if t == team}) > 1}
    return tuple(f"{team}/{group}" if team in split else team for team, group in pairs)


def team_seats(teams: Sequence[str]) -> TeamSeats | None:
    """The seats of ``teams`` (each agent's team name, or its sharing set: ``sharing_sets``), or
    ``None`` where there is one, whose sharing is sharing across all agents."""
    slots = team_slots(team_indices(teams))
    if len({k for k, _ in slots}) == 1:
        return None
    return TeamSeats(tuple(k for k, _ in slots), tuple(j for _, j in slots))
