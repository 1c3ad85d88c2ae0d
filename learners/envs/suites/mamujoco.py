"""Multi-agent MuJoCo (Peng et al., 2021) from Gymnasium-Robotics (``mamujoco_v1``, a PettingZoo
parallel env): one MuJoCo body whose joints are split among agents, each seeing its own joints
and their ``agent_obsk``-hop neighbours; continuous torques; one team sharing the body's reward."""

from __future__ import annotations

from typing import Any

from learners.enums import ActionKind
from learners.envs.suites.base import KwargRange, parameter
from learners.envs.suites.pettingzoo import PettingZooEnv, PettingZooSuite

# id -> (scenario, agent_conf, agents)
_BODIES: dict[str, tuple[str, str, int]] = {
    "HalfCheetah-2x3": ("HalfCheetah", "2x3", 2),
    "HalfCheetah-6x1": ("HalfCheetah", "6x1", 6),
    "Ant-2x4": ("Ant", "2x4", 2),
    "Ant-4x2": ("Ant", "4x2", 4),
    "Hopper-3x1": ("Hopper", "3x1", 3),
    "Walker2d-2x3": ("Walker2d", "2x3", 2),
}


def make_body(env_id: str, **kwargs: Any) -> Any:
    """The ``mamujoco_v1`` parallel env of ``env_id`` (one of the table's ids)."""
    from gymnasium_robotics import mamujoco_v1

    from learners.envs.gymnasium_env import route_mujoco_warnings

    route_mujoco_warnings()
    scenario, conf, _ = _BODIES[env_id]
    return mamujoco_v1.parallel_env(scenario, conf, **kwargs)


def _maker(env_id: str) -> Any:
    import functools

    return functools.partial(make_body, env_id)


# ``copy_mib`` bounds one copy: RSS grew 1.0 MiB (HalfCheetah 2x3) and 0.5 MiB (Ant 2x4) per copy
# over 32 stepped copies.
MAMUJOCO = PettingZooSuite(
    "mamujoco",
    "Multi-agent MuJoCo (Gymnasium-Robotics)",
    "MuJoCo bodies split among agents (mamujoco_v1): HalfCheetah, Ant, Hopper and Walker2d "
    "in the factorisations of Peng et al. (2021); continuous actions, a 1,000-step time limit.",
    {
        env_id: PettingZooEnv(
            make=_maker(env_id),
            action_kinds=frozenset({ActionKind.CONTINUOUS}),
            agents=tuple(f"agent_{i}" for i in range(agents)),
            time_limit_kwarg=None,
            max_steps=1000,
            parameters={"agent_obsk": parameter("agent_obsk", 1)},
            ranges=(KwargRange("agent_obsk", 0, 4, "hops of neighbouring joints observed"),),
            summary=f"{scenario} split {conf}: {agents} agents.",
            copy_mib=3.0,
        )
        for env_id, (scenario, conf, agents) in _BODIES.items()
    },
    requires=("gymnasium_robotics", "mujoco"),
)
