"""Gymnasium: single-agent control tasks (one agent with continuous actions), for DDPG."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from typing import Any

from learners.enums import ActionKind
from learners.envs.shapes import EnvShape, gymnasium_shape
from learners.envs.suites.base import (
    RESERVED_KWARGS,
    EnvEntry,
    EnvFactory,
    Suite,
    signature_parameters,
)

GYMNASIUM_ENVS: dict[str, ActionKind] = {
    "Pendulum-v1": ActionKind.CONTINUOUS,
    "HalfCheetah-v5": ActionKind.CONTINUOUS,
    "Hopper-v5": ActionKind.CONTINUOUS,
}
"""The Gymnasium ids we adapt, with their action kind."""
# One copy, measured as RSS growth over 16-64 stepped copies: a MuJoCo copy 1.1 MiB, Pendulum next
# to nothing.
COPY_MIB: dict[str, float] = {"Pendulum-v1": 0.1, "HalfCheetah-v5": 1.5, "Hopper-v5": 1.5}


class GymnasiumSuite(Suite):
    name = "gymnasium"
    title = "Gymnasium"
    summary = (
        "Single-agent control tasks of Gymnasium (Pendulum, and MuJoCo's HalfCheetah and "
        "Hopper): one agent with continuous actions."
    )
    multi_agent = False
    requires = ("gymnasium", "mujoco")
    reserved = {
        **RESERVED_KWARGS,
        **{
            name: "rendering is chosen by MARLForge, not by the spec"
            for name in ("camera_id", "camera_name", "default_camera_config", "visual_options")
        },
    }

    def ids(self) -> tuple[str, ...]:
        return tuple(GYMNASIUM_ENVS)

    def entry(self, env_id: str) -> EnvEntry:
        return EnvEntry(
            id=env_id,
            teams=("agent",),
            groups=("agent",),
            action_kinds=frozenset({GYMNASIUM_ENVS[env_id]}),
        )

    @functools.cache  # noqa: B019 - one instance per process; the table is fixed
    def parameters(self, env_id: str) -> Mapping[str, inspect.Parameter]:
        import gymnasium as gym
        from gymnasium.envs.registration import load_env_creator

        entry_point = gym.spec(env_id).entry_point
        target = load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point
        return signature_parameters(target)

    def sizes(self, env_id: str, kwargs: Mapping[str, Any]) -> EnvShape:
        return gymnasium_shape(env_id, kwargs)

    def copy_mib(self, env_id: str, kwargs: Mapping[str, Any]) -> float:
        return COPY_MIB[env_id]

    def factory(
        self, env_id: str, kwargs: Mapping[str, Any], seed: int, render: bool
    ) -> EnvFactory:
        from learners.envs.gymnasium_env import GymnasiumVecEnv

        return functools.partial(GymnasiumVecEnv, env_id, dict(kwargs), seed=seed, render=render)
