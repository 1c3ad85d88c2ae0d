"""Level-Based Foraging and the Multi-Robot Warehouse: EPyMARL's cooperative benchmark
(Papoudakis et al., 2021), discrete, partially observable, with sparse rewards.

Both are Gymnasium envs whose spaces are tuples with one entry per agent; ``TupleAsParallel``
gives them PettingZoo's parallel API, so they step on the same adapter as every PettingZoo
suite. The ids are the registered ones of the tasks in the EPyMARL paper (and a few small ones);
a spec may set the time limit and the reward shaping, not the layout, which the id fixes.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

from learners.enums import ActionKind
from learners.envs.suites.base import KwargRange, parameter
from learners.envs.suites.pettingzoo import PettingZooEnv, PettingZooSuite


class TupleAsParallel:
    """A Gymnasium env with ``Tuple`` observation and action spaces (one entry per agent), as a
    PettingZoo parallel env: agents ``agent_0 ... agent_{n-1}``, who all leave at the end of the
    episode."""

    def __init__(self, env: Any) -> None:
        self.env = env
        count = len(env.observation_space.spaces)
        self.possible_agents = [f"agent_{i}" for i in range(count)]
        self.agents: list[str] = []
        self.state_space = None

    def observation_space(self, agent: str) -> Any:
        return self.env.observation_space.spaces[self.possible_agents.index(agent)]

    def action_space(self, agent: str) -> Any:
        return self.env.action_space.spaces[self.possible_agents.index(agent)]

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[dict[str, Any], ...]:
        obs, _ = self.env.reset(seed=seed)
        self.agents = list(self.possible_agents)
        return dict(zip(self.possible_agents, obs, strict=True)), {}

    def step(self, actions: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
        joint = tuple(int(actions[a]) for a in self.possible_agents)
        obs, rewards, terminated, truncated, _ = self.env.step(joint)
        rewards = np.broadcast_to(np.asarray(rewards, np.float64), (len(self.possible_agents),))
        done = bool(terminated) or bool(truncated)
        if done:
            self.agents = []
        agents = self.possible_agents
        return (
            dict(zip(agents, obs, strict=True)),
            {a: float(r) for a, r in zip(agents, rewards, strict=True)},
            {a: bool(terminated) for a in agents},
            {a: bool(truncated) and not bool(terminated) for a in agents},
            {a: {} for a in agents},
        )

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()


def make_tuple_env(package: str, env_id: str, **kwargs: Any) -> TupleAsParallel:
    """The env registered as ``env_id`` by ``package``, built from its registered constructor
    arguments with ``kwargs`` over them, without Gymnasium's wrappers: the time limit is a
    constructor argument of both (``max_episode_steps``, ``max_steps``), which ``gymnasium.make``
    would take for its own ``TimeLimit`` instead, and the adapter keeps its own."""
    import importlib

    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    importlib.import_module(package)
    spec = gym.spec(env_id)
    create = load_env_creator(spec.entry_point) if isinstance(spec.entry_point, str) else None
    if create is None:
        raise ValueError(f"{env_id} has no importable entry point")
    return TupleAsParallel(create(**{**spec.kwargs, **kwargs}))


# EPyMARL's LBF tasks (Papoudakis et al., 2021) that lbforaging 2.0 registers (its v3 ids go up to
# 4 food on 15x15, so the paper's two 5-food tasks are not among them), and a
# small one for quick checks. Agents are "p", food "f"; "2s" limits sight to 2 cells; "coop"
# needs every agent to load each food.
_LBF: dict[str, int] = {
    "Foraging-5x5-2p-1f-coop-v3": 2,
    "Foraging-8x8-2p-2f-coop-v3": 2,
    "Foraging-2s-8x8-2p-2f-coop-v3": 2,
    "Foraging-10x10-3p-3f-v3": 3,
    "Foraging-2s-10x10-3p-3f-v3": 3,
    "Foraging-15x15-4p-3f-v3": 4,
}
LBF_STEPS = 50
"""The time limit LBF registers and EPyMARL trains with."""

_RWARE: dict[str, int] = {
    "rware-tiny-2ag-v2": 2,
    "rware-tiny-4ag-v2": 4,
    "rware-small-4ag-v2": 4,
    "rware-tiny-2ag-easy-v2": 2,
    "rware-tiny-2ag-hard-v2": 2,
}
RWARE_STEPS = 500
"""The time limit RWARE registers and EPyMARL trains with."""

# ``copy_mib`` bounds one copy: RSS grew under 0.05 MiB per copy over 32 stepped copies (LBF
# 15x15-4p-3f, RWARE small-4ag).
LBF = PettingZooSuite(
    "lbf",
    "Level-Based Foraging",
    "Agents with levels on a grid load food whose level is at most the sum of the levels of "
    "the agents around it (lbforaging 2.0): discrete moves and a load action, sparse reward.",
    {
        env_id: PettingZooEnv(
            make=functools.partial(make_tuple_env, "lbforaging", env_id),
            action_kinds=frozenset({ActionKind.DISCRETE}),
            agents=tuple(f"agent_{i}" for i in range(agents)),
            time_limit_kwarg="max_episode_steps",
            max_steps=LBF_STEPS,
            parameters={
                "max_episode_steps": parameter("max_episode_steps", LBF_STEPS),
                "penalty": parameter("penalty", 0.0),
                "normalize_reward": parameter("normalize_reward", True),
            },
            ranges=(KwargRange("max_episode_steps", 1, 1000, "steps per episode"),),
            summary=env_id,
            copy_mib=1.0,
        )
        for env_id, agents in _LBF.items()
    },
    requires=("lbforaging", "gymnasium"),
)
RWARE = PettingZooSuite(
    "rware",
    "Multi-Robot Warehouse",
    "Robots in a warehouse deliver requested shelves to the goal and return them (rware 2.0): "
    "discrete turns, moves and a load action, reward 1 per delivered shelf.",
    {
        env_id: PettingZooEnv(
            make=functools.partial(make_tuple_env, "rware", env_id),
            action_kinds=frozenset({ActionKind.DISCRETE}),
            agents=tuple(f"agent_{i}" for i in range(agents)),
            time_limit_kwarg="max_steps",
            max_steps=RWARE_STEPS,
            parameters={"max_steps": parameter("max_steps", RWARE_STEPS)},
            ranges=(KwargRange("max_steps", 1, 1000, "steps per episode"),),
            summary=env_id,
            copy_mib=1.0,
        )
        for env_id, agents in _RWARE.items()
    },
    requires=("rware", "gymnasium"),
)
