"""The catalogue: which algorithms exist, their config classes, and which backends are built.

This is data, read by the API (to validate specs and serve ``/v1/algorithms``), by the worker (to
find the learner class) and by the tests (which are parametrised over it, so a new algorithm or
backend is covered without new test code). Learner classes are named by import path and imported
only when a run asks for them, so reading the catalogue never imports a deep-learning framework.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from learners.algorithms.ddpg import DDPGConfig
from learners.algorithms.maddpg import MADDPGConfig
from learners.algorithms.ppo import IPPOConfig, MAPPOConfig
from learners.algorithms.wqmix import WQMIXConfig
from learners.config import AlgorithmConfig
from learners.enums import ActionKind, Algorithm, Backend
from learners.envs.suites.installed import suites as installed_suites


class RunnerKind(StrEnum):
    """The training loop an algorithm runs in: ``learners.runners.<kind>.run(ctx)``."""

    OFF_POLICY = "off_policy"
    ON_POLICY = "on_policy"


@dataclass(frozen=True)
class AlgorithmEntry:
    """One algorithm in the catalogue."""

    algorithm: Algorithm
    title: str
    summary: str
    config: type[AlgorithmConfig]
    multi_agent: bool
    """Whether it trains several agents: it trains on the multi-agent suites (every installed one
    but Gymnasium) if so, on the single-agent ones if not."""
    action_kinds: frozenset[ActionKind]
    runner: RunnerKind
    # backend -> "module:Class" of the learner; a backend appears here only once it is built.
    learners: dict[Backend, str] = field(default_factory=dict)
    policy_network: str = "actor"
    """The network that acts: its tensors (``<policy_network>.<param>`` in a checkpoint) are what
    ``load_policy`` reads and what a policy-only export keeps."""
    one_team: bool = False
    """It learns one reward shared by all agents (WQMIX's mixer), so a scenario with more than one
    team is refused: it would train on a mean over opponents that no team maximises."""
    env_defaults: dict[str, dict[str, Any]] = field(default_factory=dict)
    """What a spec that leaves ``env.num_envs`` or an ``env.kwargs`` entry out gets, keyed like a
    config's ``env_defaults`` (an env id, ``suite:*``, or ``*`` for every suite): the settings
    ``docs/algorithms.md`` measured the algorithm with, so that a spec without them trains as the
    tables did."""

    def env_defaults_for(self, suite: str, env_id: str) -> dict[str, Any]:
        """``{"num_envs": ..., "kwargs": {...}}`` as far as the algorithm sets them on ``env_id``
        (an exact id's entries over the suite's)."""
        wide = {**self.env_defaults.get("*", {}), **self.env_defaults.get(f"{suite}:*", {})}
        exact = self.env_defaults.get(env_id, {})
        merged: dict[str, Any] = {**wide, **exact}
        kwargs = {**wide.get("kwargs", {}), **exact.get("kwargs", {})}
        if kwargs:
            merged["kwargs"] = kwargs
        return merged

    @property
    def suites(self) -> frozenset[str]:
        """The installed suites it trains on (``multi_agent`` decides)."""
        return frozenset(s.name for s in installed_suites() if s.multi_agent == self.multi_agent)

    @property
    def backends(self) -> frozenset[Backend]:
        """The backends this algorithm is built for."""
        return frozenset(self.learners)

    def learner_class(self, backend: Backend) -> Any:
        """Import and return the learner class for ``backend`` (imports that framework)."""
        module, _, name = self.learners[backend].partition(":")
        return getattr(importlib.import_module(module), name)


_CLASS_PREFIX = {
    Backend.TORCH: "Torch",
    Backend.TENSORFLOW: "TensorFlow",
    Backend.MINDSPORE: "MindSpore",
}


def _built(module: str, name: str, *backends: Backend) -> dict[Backend, str]:
    """Learner import paths, ``learners.backends.<backend>.<module>:<Prefix><name>``, for the
    backends ``name`` is built for."""
    return {b: f"learners.backends.{b.value}.{module}:{_CLASS_PREFIX[b]}{name}" for b in backends}


_MPE_ENVS = 8
"""The parallel envs the MPE studies behind the defaults were measured with
(docs/results/2026-11-27-fresh-seed-targets.md summarises them)."""

_ENTRIES: dict[Algorithm, AlgorithmEntry] = {
    Algorithm.DDPG: AlgorithmEntry(
        algorithm=Algorithm.DDPG,
        title="DDPG",
        summary="Deep deterministic policy gradient (Lillicrap et al., 2016) for one agent with "
        "continuous actions: a deterministic actor, a Q critic, target networks with soft updates "
        "and Gaussian exploration noise.",
        config=DDPGConfig,
        multi_agent=False,
        action_kinds=frozenset({ActionKind.CONTINUOUS}),
        runner=RunnerKind.OFF_POLICY,
        learners=_built("ddpg", "DDPG", *Backend),
    ),
    Algorithm.MADDPG: AlgorithmEntry(
        algorithm=Algorithm.MADDPG,
        title="MADDPG",
        summary="Multi-agent DDPG (Lowe et al., 2017): deterministic per-agent actors and "
        "centralised critics on every agent's observation and action, soft target updates and "
        "exploration noise; continuous actions, or discrete ones through Gumbel-softmax; shared "
        "parameters with one-hot agent ids by default. maddpg with centralised_critic: false = "
        "independent DDPG learners (the paper's DDPG baseline).",
        config=MADDPGConfig,
        multi_agent=True,
        action_kinds=frozenset({ActionKind.CONTINUOUS, ActionKind.DISCRETE}),
        runner=RunnerKind.OFF_POLICY,
        learners=_built("maddpg", "MADDPG", *Backend),
        # Benchmarked with continuous actions (docs/algorithms.md), so that is what a spec gets.
        env_defaults={
            "*": {"num_envs": _MPE_ENVS},
            "mpe:*": {"kwargs": {"continuous_actions": True}},
        },
    ),
    Algorithm.IPPO: AlgorithmEntry(
        algorithm=Algorithm.IPPO,
        title="IPPO",
        summary="Independent PPO (de Witt et al., 2020): stochastic per-agent policies trained "
        "with PPO's clipped surrogate and GAE, each critic seeing only its agent's observation; "
        "shared parameters with one-hot agent ids by default, optional GRU memory.",
        config=IPPOConfig,
        multi_agent=True,
        action_kinds=frozenset({ActionKind.CONTINUOUS, ActionKind.DISCRETE}),
        runner=RunnerKind.ON_POLICY,
        learners=_built("ppo", "PPO", *Backend),
        env_defaults={"*": {"num_envs": _MPE_ENVS}},
    ),
    Algorithm.MAPPO: AlgorithmEntry(
        algorithm=Algorithm.MAPPO,
        title="MAPPO",
        summary="Multi-agent PPO (Yu et al., 2022): IPPO's decentralised stochastic policies "
        "with a centralised critic on the global state, value normalisation, value clipping and "
        "a Huber value loss; shared parameters with one-hot agent ids by default, optional GRU.",
        config=MAPPOConfig,
        multi_agent=True,
        action_kinds=frozenset({ActionKind.CONTINUOUS, ActionKind.DISCRETE}),
        runner=RunnerKind.ON_POLICY,
        learners=_built("ppo", "PPO", *Backend),
        env_defaults={"*": {"num_envs": _MPE_ENVS}},
    ),
    Algorithm.WQMIX: AlgorithmEntry(
        algorithm=Algorithm.WQMIX,
        title="Weighted QMIX",
        summary="Weighted QMIX (Rashid et al., 2020): QMIX's monotonic mixing of per-agent "
        "utilities trained with an optimistic (OW) or central (CW) weighting, beside an "
        "unrestricted central Q* that gives the double-Q targets; epsilon-greedy, discrete "
        "actions; optional GRU agents trained on whole episodes.",
        config=WQMIXConfig,
        multi_agent=True,
        action_kinds=frozenset({ActionKind.DISCRETE}),
        runner=RunnerKind.OFF_POLICY,
        learners=_built("wqmix", "WQMIX", *Backend),
        policy_network="agent",
        one_team=True,
        env_defaults={"*": {"num_envs": _MPE_ENVS}},
    ),
}


def entry(algorithm: Algorithm | str) -> AlgorithmEntry:
    """The catalogue entry of ``algorithm``; KeyError if it is not an algorithm."""
    return _ENTRIES[Algorithm(algorithm)]


def entries() -> Iterator[AlgorithmEntry]:
    """Every algorithm in the catalogue, in the order of ``Algorithm``."""
    return (e for a in Algorithm if (e := _ENTRIES.get(a)) is not None)


def built_pairs() -> list[tuple[Algorithm, Backend]]:
    """Every (algorithm, backend) pair that can run, for tests parametrised over the registry."""
    return [(e.algorithm, b) for e in entries() for b in Backend if b in e.backends]
