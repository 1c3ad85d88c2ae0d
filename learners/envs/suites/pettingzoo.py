"""A suite of PettingZoo envs from a table: each id names the function that builds its parallel env
(an AEC env goes through PettingZoo's own ``aec_to_parallel``), its teams and groups, the kwarg
that sets its time limit and the limit's default. SISL, multi-agent MuJoCo and operator plugins
are such tables (``docs/environments.md`` walks through writing one).

An agent's group is its name without the ``_<index>`` (``pursuer_3`` is in group ``pursuer``), and
so is its team unless the table says which team each name plays on (``PettingZooEnv.teams``).
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from learners.enums import ActionKind
from learners.envs.shapes import EnvShape
from learners.envs.suites.base import (
    RESERVED_KWARGS,
    EnvEntry,
    EnvFactory,
    KwargRange,
    Suite,
    signature_parameters,
)
from learners.envs.teams import team_of, teams_of


@dataclass(frozen=True)
class PettingZooEnv:
    """One id of a PettingZoo suite."""

    make: Callable[..., Any]
    """A module-level function (picklable) taking the spec's kwargs and ``render_mode``, returning
    a parallel env (or an AEC env, converted)."""
    action_kinds: frozenset[ActionKind]
    agents: tuple[str, ...]
    """The agents with the default kwargs, in order (listed without building one)."""
    teams: Mapping[str, str] | None = None
    """An agent's team by its name without the ``_<index>`` (``{"scout": "agent", "carrier":
    "agent"}``: both on one team); a name not in it, or ``None``, is its own team. Read off the
    agents an env has, so it holds whatever agent counts the kwargs make."""
    time_limit_kwarg: str | None = "max_cycles"
    max_steps: int = 500
    """The time limit when the spec leaves ``time_limit_kwarg`` out."""
    ranges: tuple[KwargRange, ...] = ()
    parameters: Mapping[str, inspect.Parameter] | None = None
    """The kwargs a spec may set; ``None``: read off ``make``'s constructor signature."""
    summary: str = ""
    copy_mib: float = 8.0
    signature_of: Callable[..., Any] | None = None
    """Whose signature lists the kwargs when ``make`` is a wrapper (the env class it builds)."""
    env_state: bool = True
    """Use the env's own ``state()`` as the global state, where it declares one; false: the
    agents' observations side by side."""
    conflicts: Callable[[Mapping[str, Any]], list[tuple[str, str]]] | None = None
    """``Suite.kwarg_conflicts`` of this id: the kwargs (defaults filled in) to ``(kwarg,
    reason)`` pairs."""


def team_by_name(teams: Mapping[str, str] | None, agent_id: str) -> str:
    """The team of agent ``agent_id`` by a table of name prefixes (``PettingZooEnv.teams``)."""
    group = team_of(agent_id)
    return (teams or {}).get(group, group)


def _parallel(make: Callable[..., Any], kwargs: Mapping[str, Any], render: bool) -> Any:
    from pettingzoo.utils.conversions import aec_to_parallel
    from pettingzoo.utils.env import AECEnv

    env = make(render_mode="rgb_array" if render else None, **kwargs)
    return aec_to_parallel(env) if isinstance(env, AECEnv) else env


def _factory(
    name: str,
    spec: PettingZooEnv,
    kwargs: dict[str, Any],
    seed: int,
    render: bool,
    num_envs: int,
    *,
    first_copy: int,
) -> Any:
    from learners.envs.parallel import ParallelVecEnv

    make_env = functools.partial(_parallel, spec.make, kwargs)
    probe = make_env(False)
    agents = tuple(probe.possible_agents)
    probe.close()
    limit = spec.max_steps
    if spec.time_limit_kwarg is not None and spec.time_limit_kwarg in kwargs:
        limit = int(kwargs[spec.time_limit_kwarg])
    return ParallelVecEnv(
        make_env,
        num_envs,
        seed,
        first_copy=first_copy,
        render=render,
        name=name,
        teams=[team_by_name(spec.teams, a) for a in agents],
        groups=teams_of(agents),
        max_episode_steps=limit,
        use_env_state=spec.env_state,
    )


class PettingZooSuite(Suite):
    """A suite whose envs are PettingZoo envs listed in ``envs``."""

    def __init__(
        self,
        name: str,
        title: str,
        summary: str,
        envs: Mapping[str, PettingZooEnv],
        *,
        reserved: Mapping[str, str] | None = None,
        requires: tuple[str, ...] = (),
    ) -> None:
        self.name, self.title, self.summary = name, title, summary
        self.requires = ("pettingzoo", *requires)
        self.envs = dict(envs)
        self.reserved = {**RESERVED_KWARGS, **(reserved or {})}
        self._shapes: dict[tuple[str, str], EnvShape] = {}

    def ids(self) -> tuple[str, ...]:
        return tuple(self.envs)

    def entry(self, env_id: str) -> EnvEntry:
        spec = self.envs[env_id]
        return EnvEntry(
            id=env_id,
            teams=tuple(team_by_name(spec.teams, a) for a in spec.agents),
            groups=teams_of(spec.agents),
            action_kinds=spec.action_kinds,
            summary=spec.summary,
        )

    def parameters(self, env_id: str) -> Mapping[str, inspect.Parameter]:
        spec = self.envs[env_id]
        if spec.parameters is not None:
            return spec.parameters
        return signature_parameters(spec.signature_of or spec.make)

    def ranges(self, env_id: str) -> tuple[KwargRange, ...]:
        return self.envs[env_id].ranges

    def kwarg_conflicts(self, env_id: str, kwargs: Mapping[str, Any]) -> list[tuple[str, str]]:
        conflicts = self.envs[env_id].conflicts
        return [] if conflicts is None else conflicts(kwargs)

    def action_kind(self, env_id: str, kwargs: Mapping[str, Any]) -> ActionKind:
        kinds = self.envs[env_id].action_kinds
        if len(kinds) == 1:
            return next(iter(kinds))
        continuous = kwargs.get("continuous_actions") is True
        return ActionKind.CONTINUOUS if continuous else ActionKind.DISCRETE

    def action_kind_field(self, env_id: str) -> str | None:
        return "continuous_actions" if len(self.envs[env_id].action_kinds) > 1 else None

    def sizes(self, env_id: str, kwargs: Mapping[str, Any]) -> EnvShape:
        key = (env_id, json.dumps(dict(kwargs), sort_keys=True))
        if key not in self._shapes:
            env = self.factory(env_id, kwargs, 0, False)(1, first_copy=0)
            try:
                self._shapes[key] = EnvShape.from_info(env.info)
            finally:
                env.close()
        return self._shapes[key]

    def copy_mib(self, env_id: str, kwargs: Mapping[str, Any]) -> float:
        return self.envs[env_id].copy_mib

    def factory(
        self, env_id: str, kwargs: Mapping[str, Any], seed: int, render: bool
    ) -> EnvFactory:
        spec = self.envs[env_id]
        return functools.partial(_factory, env_id, spec, dict(kwargs), seed, render)
