"""The environments a spec may name: each suite's ids, their teams and action kinds, and the
constructor arguments each takes (read from its signature, never by building one).

Data and lookups only: whether a spec's env may run with its algorithm is
``learners.admission.envs``; building the env is ``learners.envs.factory``.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
from collections.abc import Mapping
from typing import Any

from learners.enums import EnvSuite
from learners.registry import ActionKind

# Gymnasium ids we adapt, with their action kind (all Box today).
GYMNASIUM_ENVS: dict[str, ActionKind] = {
    "Pendulum-v1": ActionKind.CONTINUOUS,
    "HalfCheetah-v5": ActionKind.CONTINUOUS,
    "Hopper-v5": ActionKind.CONTINUOUS,
}
# mpe2 scenarios (module names); the ``continuous_actions`` kwarg picks the action kind.
MPE_ENVS: tuple[str, ...] = (
    "simple_spread_v3",
    "simple_adversary_v3",
    "simple_push_v3",
    "simple_tag_v3",
)
# Each mpe2 scenario's teams in agent order: the names its agents carry (``learners.envs.teams``),
# checked against the built envs by tests/learners/test_learners_teams.py.
# ``learners.admission.budget`` keeps at least one agent on each side, so they hold whatever kwargs
# a spec passes.
MPE_TEAMS: dict[str, tuple[str, ...]] = {
    "simple_spread_v3": ("agent",),
    "simple_adversary_v3": ("adversary", "agent"),
    "simple_push_v3": ("adversary", "agent"),
    "simple_tag_v3": ("adversary", "agent"),
}
# Constructor arguments a spec may not set: the adapter owns rendering, and a file path would let a
# spec make the worker read any file on its disk.
RESERVED_KWARGS: dict[str, str] = {
    "render_mode": "rendering is chosen by MARLForge, not by the spec",
    "xml_file": "a model file path cannot be set from a spec",
    "model_path": "a model file path cannot be set from a spec",
    "observation_space": "the observation space is fixed by the environment",
}


def env_ids(suite: EnvSuite) -> tuple[str, ...]:
    """The env ids ``suite`` offers."""
    return tuple(GYMNASIUM_ENVS) if suite == EnvSuite.GYMNASIUM else MPE_ENVS


def scenario_teams(suite: EnvSuite, env_id: str) -> tuple[str, ...]:
    """The teams of a catalogued env, in agent order; a Gymnasium env's one agent is ``agent``."""
    return MPE_TEAMS[env_id] if suite == EnvSuite.MPE else ("agent",)


def _constructor(suite: EnvSuite, env_id: str) -> Any:
    if suite == EnvSuite.GYMNASIUM:
        import gymnasium as gym
        from gymnasium.envs.registration import load_env_creator

        entry_point = gym.spec(env_id).entry_point
        return load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    module = importlib.import_module(f"mpe2.{env_id}")
    return module.raw_env


@functools.lru_cache(maxsize=64)
def constructor_parameters(suite: EnvSuite, env_id: str) -> Mapping[str, inspect.Parameter]:
    """The keyword parameters the env's constructor takes, following ``**kwargs`` into the base
    class it forwards them to (MuJoCo envs forward theirs to ``MujocoEnv``)."""
    target = _constructor(suite, env_id)
    classes = inspect.getmro(target) if inspect.isclass(target) else (target,)
    params: dict[str, inspect.Parameter] = {}
    for cls in classes:
        signature = inspect.signature(cls.__init__ if inspect.isclass(cls) else cls)
        for name, param in signature.parameters.items():
            if name != "self" and param.kind not in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
                params.setdefault(name, param)
        if not any(p.kind == p.VAR_KEYWORD for p in signature.parameters.values()):
            break
    return params


def action_kind(suite: EnvSuite, env_id: str, kwargs: Mapping[str, Any]) -> ActionKind:
    """The action kind a (validated) env spec gives."""
    if suite == EnvSuite.GYMNASIUM:
        return GYMNASIUM_ENVS[env_id]
    return (
        ActionKind.CONTINUOUS if kwargs.get("continuous_actions") is True else ActionKind.DISCRETE
    )
