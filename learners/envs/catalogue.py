"""The environments a spec may name, looked up in the installed suites
(``learners.envs.suites.installed``): each suite's ids, their teams and action kinds, the
constructor arguments each takes, and one copy's sizes.

Lookups only: whether a spec's env may run with its algorithm is ``learners.admission.envs``;
building the env is ``learners.envs.factory``.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from learners.enums import ActionKind
from learners.envs.shapes import EnvShape
from learners.envs.suites.base import RESERVED_KWARGS, Suite
from learners.envs.suites.gymnasium import GYMNASIUM_ENVS
from learners.envs.suites.installed import suite, suite_names, suites
from learners.envs.suites.mpe import MPE_ENVS, MPE_TEAMS

__all__ = [
    "GYMNASIUM_ENVS",
    "MPE_ENVS",
    "MPE_TEAMS",
    "RESERVED_KWARGS",
    "Suite",
    "action_kind",
    "constructor_parameters",
    "env_ids",
    "env_shape",
    "reserved_kwargs",
    "scenario_teams",
    "suite",
    "suite_names",
    "suites",
]


def env_ids(suite_name: str) -> tuple[str, ...]:
    """The env ids ``suite_name`` offers."""
    return suite(suite_name).ids()


def scenario_teams(suite_name: str, env_id: str) -> tuple[str, ...]:
    """The teams of a catalogued env with its default arguments, in the order their first agent
    appears; a Gymnasium env's one agent is ``agent``."""
    return tuple(dict.fromkeys(suite(suite_name).entry(env_id).teams))


def constructor_parameters(suite_name: str, env_id: str) -> Mapping[str, inspect.Parameter]:
    """The keyword parameters the env's constructor takes."""
    return suite(suite_name).parameters(env_id)


def reserved_kwargs(suite_name: str) -> Mapping[str, str]:
    """The constructor arguments no spec may set in ``suite_name``, with the reason."""
    return suite(suite_name).reserved


def action_kind(suite_name: str, env_id: str, kwargs: Mapping[str, Any]) -> ActionKind:
    """The action kind a (validated) env spec gives."""
    return suite(suite_name).action_kind(env_id, kwargs)


def env_shape(suite_name: str, env_id: str, kwargs: Mapping[str, Any]) -> EnvShape:
    """The shape of ``env_id`` built with ``kwargs`` (both validated by ``parse_spec``). May build
    one copy: bound its counts first. Raises what the env's constructor raises when it refuses
    the kwargs."""
    return suite(suite_name).sizes(env_id, kwargs)
