"""mpe2, the multi-agent particle environments: all twelve scenarios, on mpe2 itself or (the four
it models) on MARLForge's vector engine.

The four scenarios MARLForge had first (simple_spread, simple_adversary, simple_push, simple_tag)
step on ``learners.envs.mpe.MPEVecEnv``, which the vector engine is held equal to step for step;
the other eight (among them every scenario where agents communicate, whose speakers and listeners
differ in observation and action size) step on the generic ``learners.envs.parallel`` adapter,
which pads their spaces. The ``continuous_actions`` kwarg picks the action kind.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import os
from collections.abc import Mapping
from typing import Any

from learners.enums import ActionKind
from learners.envs.shapes import EnvShape
from learners.envs.suites.base import EnvEntry, EnvFactory, Suite, signature_parameters

_ADVERSARY = "adversary"
_AGENT = "agent"
MPE_TEAMS: dict[str, tuple[str, ...]] = {
    "simple_spread_v3": (_AGENT,),
    "simple_adversary_v3": (_ADVERSARY, _AGENT),
    "simple_push_v3": (_ADVERSARY, _AGENT),
    "simple_tag_v3": (_ADVERSARY, _AGENT),
    "simple_v3": (_AGENT,),
    "simple_speaker_listener_v4": (_AGENT,),
    "simple_reference_v3": (_AGENT,),
    "simple_world_comm_v3": (_ADVERSARY, _AGENT),
    "simple_crypto_v3": (_ADVERSARY, _AGENT),
    "simple_formation_v1": (_AGENT,),
    "simple_line_v1": (_AGENT,),
    "collect_treasure_v1": (_AGENT,),
}
"""Each scenario's teams, in the order their first agent appears (checked against the built envs
by tests/learners/test_learners_teams.py)."""
MPE_ENVS: tuple[str, ...] = tuple(MPE_TEAMS)
CLASSIC_MPE_ENVS: tuple[str, ...] = MPE_ENVS[:4]
"""The scenarios that step on ``MPEVecEnv`` (and that the vector engine models)."""

# An agent name's prefix -> (team, group) where the prefix alone does not say both: the
# speaker and listener cooperate; simple_world_comm's leader is an adversary with a body of its
# own; simple_crypto's eavesdropper plays against the pair that encrypts.
_ROLES: dict[str, tuple[str, str]] = {
    "speaker": (_AGENT, "speaker"),
    "listener": (_AGENT, "listener"),
    "leadadversary": (_ADVERSARY, "leadadversary"),
    "eve": (_ADVERSARY, "eve"),
    "alice": (_AGENT, "alice"),
    "bob": (_AGENT, "bob"),
    "collector": (_AGENT, "collector"),
    "deposit": (_AGENT, "deposit"),
}


def role(agent_id: str) -> tuple[str, str]:
    """An mpe2 agent's (team, group), from its name."""
    prefix = agent_id.rsplit("_", 1)[0]
    return _ROLES.get(prefix, (prefix, prefix))


def parallel_env(env_id: str, kwargs: Mapping[str, Any], render: bool = False) -> Any:
    """One mpe2 parallel env; ``env_id`` must be one of ``MPE_ENVS`` (it names a module)."""
    if env_id not in MPE_TEAMS:
        raise ValueError(f"unknown mpe2 scenario {env_id!r}")
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    module = importlib.import_module(f"mpe2.{env_id}")
    return module.parallel_env(render_mode="rgb_array" if render else None, **kwargs)


def _make_parallel(env_id: str, kwargs: dict[str, Any], render: bool) -> Any:
    return parallel_env(env_id, kwargs, render)


def _parallel_factory(
    env_id: str, kwargs: dict[str, Any], seed: int, render: bool, num_envs: int, *, first_copy: int
) -> Any:
    from learners.envs.parallel import ParallelVecEnv

    probe = parallel_env(env_id, kwargs)
    agents = tuple(probe.possible_agents)
    max_cycles = int(probe.unwrapped.max_cycles)
    probe.close()
    return ParallelVecEnv(
        functools.partial(_make_parallel, env_id, kwargs),
        num_envs,
        seed,
        first_copy=first_copy,
        render=render,
        name=env_id,
        teams=[role(a)[0] for a in agents],
        groups=[role(a)[1] for a in agents],
        max_episode_steps=max_cycles,
    )


@functools.lru_cache(maxsize=256)
def _shape(env_id: str, kwargs_json: str) -> EnvShape:
    kwargs = json.loads(kwargs_json)
    if env_id in CLASSIC_MPE_ENVS:
        from learners.envs.mpe import scenario_info

        return EnvShape.from_info(scenario_info(env_id, kwargs))
    env = _parallel_factory(env_id, kwargs, 0, False, 1, first_copy=0)
    try:
        return EnvShape.from_info(env.info)
    finally:
        env.close()


class MPESuite(Suite):
    name = "mpe"
    requires = ("mpe2", "pettingzoo")
    title = "Multi-agent particle environments (mpe2)"
    summary = (
        "The twelve particle-world scenarios of mpe2 (PettingZoo parallel API): cooperative "
        "navigation, predator-prey, communication (speaker and listener), adversarial deception "
        "and cryptography; discrete actions, or continuous with continuous_actions: true."
    )

    def ids(self) -> tuple[str, ...]:
        return MPE_ENVS

    @functools.cache  # noqa: B019 - one instance per process; the table is fixed
    def entry(self, env_id: str) -> EnvEntry:
        agents = _default_agents(env_id)
        return EnvEntry(
            id=env_id,
            teams=tuple(role(a)[0] for a in agents),
            groups=tuple(role(a)[1] for a in agents),
            action_kinds=frozenset({ActionKind.DISCRETE, ActionKind.CONTINUOUS}),
        )

    @functools.cache  # noqa: B019
    def parameters(self, env_id: str) -> Mapping[str, inspect.Parameter]:
        os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
        return signature_parameters(importlib.import_module(f"mpe2.{env_id}").raw_env)

    def action_kind(self, env_id: str, kwargs: Mapping[str, Any]) -> ActionKind:
        continuous = kwargs.get("continuous_actions") is True
        return ActionKind.CONTINUOUS if continuous else ActionKind.DISCRETE

    def action_kind_field(self, env_id: str) -> str | None:
        return "continuous_actions"

    def sizes(self, env_id: str, kwargs: Mapping[str, Any]) -> EnvShape:
        return _shape(env_id, json.dumps(dict(kwargs), sort_keys=True))

    def copy_mib(self, env_id: str, kwargs: Mapping[str, Any]) -> float:
        # Measured as RSS growth over 16-64 stepped copies: an mpe2 copy holds a 700x700 pygame
        # surface (1.9 MiB at 3 agents, 2.3 at 32).
        return 2.5

    def factory(
        self, env_id: str, kwargs: Mapping[str, Any], seed: int, render: bool
    ) -> EnvFactory:
        if env_id in CLASSIC_MPE_ENVS:
            from learners.envs.mpe import MPEVecEnv

            return functools.partial(MPEVecEnv, env_id, dict(kwargs), seed=seed, render=render)
        return functools.partial(_parallel_factory, env_id, dict(kwargs), seed, render)


# The default agents of each scenario, in order (read off mpe2 1.1 by the test above; listing
# them keeps the API from building an env to list the catalogue).
_DEFAULT_AGENTS: dict[str, tuple[str, ...]] = {
    "simple_spread_v3": ("agent_0", "agent_1", "agent_2"),
    "simple_adversary_v3": ("adversary_0", "agent_0", "agent_1"),
    "simple_push_v3": ("adversary_0", "agent_0"),
    "simple_tag_v3": ("adversary_0", "adversary_1", "adversary_2", "agent_0"),
    "simple_v3": ("agent_0",),
    "simple_speaker_listener_v4": ("speaker_0", "listener_0"),
    "simple_reference_v3": ("agent_0", "agent_1"),
    "simple_world_comm_v3": (
        "leadadversary_0", "adversary_0", "adversary_1", "adversary_2", "agent_0", "agent_1",
    ),
    "simple_crypto_v3": ("eve_0", "bob_0", "alice_0"),
    "simple_formation_v1": ("agent_0", "agent_1", "agent_2", "agent_3"),
    "simple_line_v1": ("agent_0", "agent_1", "agent_2", "agent_3"),
    "collect_treasure_v1": tuple(
        [f"collector_{i}" for i in range(6)] + [f"deposit_{i}" for i in range(2)]
    ),
}  # fmt: skip


def _default_agents(env_id: str) -> tuple[str, ...]:
    return _DEFAULT_AGENTS[env_id]
