"""PettingZoo's SISL suite (Gupta et al., 2017): cooperative pursuit on a grid (discrete), and
waterworld and multiwalker (continuous). Every agent shares the team's reward by default
(``shared_reward``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from learners.enums import ActionKind
from learners.envs.suites.base import KwargRange, parameter
from learners.envs.suites.pettingzoo import PettingZooEnv, PettingZooSuite

_STEPS = KwargRange("max_cycles", 1, 1000, "steps per episode")


def _pursuit(**kwargs: Any) -> Any:
    from pettingzoo.sisl import pursuit_v4

    return pursuit_v4.parallel_env(**kwargs)


def _pursuit_conflicts(kwargs: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Pursuit places each agent at random on a free cell that no agent of its kind stands on or
    next to, trying until one is found (``agent_utils.feasible_position_exp``): too many agents
    for the grid and its building would make it try for ever. Each agent takes at most five cells
    (its own and its neighbours), so ``n`` agents always fit when ``5 * (n - 1)`` cells leave one
    free."""
    x_size, y_size = int(kwargs["x_size"]), int(kwargs["y_size"])
    free = sum(
        not (0.3 < i / x_size < 0.7 and 0.2 < j / y_size < 0.8)  # pursuit's rectangle_map building
        for i in range(x_size)
        for j in range(y_size)
    )
    most = 1 + max(free - 1, 0) // 5
    return [
        (
            kind,
            f"at most {most} {kind.removeprefix('n_')} fit a {x_size}x{y_size} grid "
            f"({free} free cells, each agent keeping its neighbours free; got {kwargs[kind]})",
        )
        for kind in ("n_pursuers", "n_evaders")
        if int(kwargs[kind]) > most
    ]


def _waterworld(**kwargs: Any) -> Any:
    from pettingzoo.sisl import waterworld_v4

    return waterworld_v4.parallel_env(**kwargs)


def _multiwalker(**kwargs: Any) -> Any:
    from pettingzoo.sisl import multiwalker_v9

    return multiwalker_v9.parallel_env(**kwargs)


# ``copy_mib`` bounds one copy: RSS grew 0.1 MiB (pursuit, multiwalker) and 0.6 MiB (waterworld)
# per copy over 32 stepped copies.
SISL = PettingZooSuite(
    "sisl",
    "PettingZoo SISL",
    "Cooperative pursuit, waterworld and multiwalker from PettingZoo's SISL set (PettingZoo "
    "1.25): pursuers on a grid catching evaders (discrete), pursuers in a continuous pool "
    "eating food and avoiding poison, and bipedal walkers carrying a package (continuous).",
    {
        "pursuit_v4": PettingZooEnv(
            make=_pursuit,
            action_kinds=frozenset({ActionKind.DISCRETE}),
            agents=tuple(f"pursuer_{i}" for i in range(8)),
            parameters={
                "x_size": parameter("x_size", 16),
                "y_size": parameter("y_size", 16),
                "max_cycles": parameter("max_cycles", 500),
                "shared_reward": parameter("shared_reward", True),
                "n_evaders": parameter("n_evaders", 30),
                "n_pursuers": parameter("n_pursuers", 8),
                "obs_range": parameter("obs_range", 7),
                "n_catch": parameter("n_catch", 2),
                "freeze_evaders": parameter("freeze_evaders", False),
                "tag_reward": parameter("tag_reward", 0.01),
                "catch_reward": parameter("catch_reward", 5.0),
                "urgency_reward": parameter("urgency_reward", -0.1),
                "surround": parameter("surround", True),
            },
            ranges=(
                KwargRange("x_size", 2, 64, "grid cells across"),
                KwargRange("y_size", 2, 64, "grid cells down"),
                KwargRange("n_evaders", 1, 256, "evaders"),
                KwargRange("n_pursuers", 1, 32, "pursuers"),
                KwargRange("obs_range", 1, 15, "cells seen across"),
                KwargRange("n_catch", 1, 32, "pursuers needed for a catch"),
                _STEPS,
            ),
            summary="8 pursuers on a 16x16 grid, each seeing a 7x7 window; discrete moves.",
            copy_mib=4.0,
            conflicts=_pursuit_conflicts,
        ),
        "waterworld_v4": PettingZooEnv(
            make=_waterworld,
            action_kinds=frozenset({ActionKind.CONTINUOUS}),
            agents=("pursuer_0", "pursuer_1"),
            parameters={
                "n_pursuers": parameter("n_pursuers", 2),
                "n_evaders": parameter("n_evaders", 5),
                "n_poisons": parameter("n_poisons", 10),
                "n_coop": parameter("n_coop", 1),
                "n_sensors": parameter("n_sensors", 30),
                "sensor_range": parameter("sensor_range", 0.2),
                "food_reward": parameter("food_reward", 10.0),
                "poison_reward": parameter("poison_reward", -1.0),
                "encounter_reward": parameter("encounter_reward", 0.01),
                "thrust_penalty": parameter("thrust_penalty", -0.5),
                "local_ratio": parameter("local_ratio", 1.0),
                "speed_features": parameter("speed_features", True),
                "max_cycles": parameter("max_cycles", 500),
            },
            ranges=(
                KwargRange("n_pursuers", 1, 32, "pursuers"),
                KwargRange("n_evaders", 0, 256, "food particles"),
                KwargRange("n_poisons", 0, 256, "poison particles"),
                KwargRange("n_coop", 1, 32, "pursuers needed to eat"),
                KwargRange("n_sensors", 1, 128, "range sensors"),
                _STEPS,
            ),
            summary="2 pursuers with 30 range sensors each in a continuous pool; 2-D thrust.",
            copy_mib=4.0,
        ),
        "multiwalker_v9": PettingZooEnv(
            make=_multiwalker,
            action_kinds=frozenset({ActionKind.CONTINUOUS}),
            agents=("walker_0", "walker_1", "walker_2"),
            parameters={
                "n_walkers": parameter("n_walkers", 3),
                "position_noise": parameter("position_noise", 0.001),
                "angle_noise": parameter("angle_noise", 0.001),
                "forward_reward": parameter("forward_reward", 1.0),
                "terminate_reward": parameter("terminate_reward", -100.0),
                "fall_reward": parameter("fall_reward", -10.0),
                "shared_reward": parameter("shared_reward", True),
                "terminate_on_fall": parameter("terminate_on_fall", True),
                "remove_on_fall": parameter("remove_on_fall", True),
                "terrain_length": parameter("terrain_length", 200),
                "max_cycles": parameter("max_cycles", 500),
            },
            ranges=(
                KwargRange("n_walkers", 2, 16, "walkers"),
                KwargRange("terrain_length", 20, 1000, "terrain steps"),
                _STEPS,
            ),
            summary="3 bipedal walkers carrying a package over rough terrain; 4 joint torques.",
            copy_mib=4.0,
            # Its state() reads every walker's hull, which a fallen walker no longer has.
            env_state=False,
        ),
    },
    requires=("pettingzoo.sisl", "pymunk", "Box2D", "pygame"),
)
