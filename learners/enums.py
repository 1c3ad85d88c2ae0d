"""The closed vocabularies of MARLForge, defined once and used by the API, the worker and the
learners."""

from __future__ import annotations

from enum import StrEnum


class Algorithm(StrEnum):
    """A learning algorithm. Variants (IPPO vs MAPPO critic, OW vs CW weighting) come from
    config."""

    IPPO = "ippo"
    MAPPO = "mappo"
    MADDPG = "maddpg"
    WQMIX = "wqmix"
    DDPG = "ddpg"


class Backend(StrEnum):
    """A deep-learning framework that runs a learner's math."""

    TORCH = "torch"
    TENSORFLOW = "tensorflow"
    MINDSPORE = "mindspore"


class EnvSuite(StrEnum):
    """The built-in families of environments, one suite each (``learners.envs.suites``). A spec's
    ``env.suite`` may also name a suite an installed plugin registers."""

    GYMNASIUM = "gymnasium"
    MPE = "mpe"
    SISL = "sisl"
    MAMUJOCO = "mamujoco"
    LBF = "lbf"
    RWARE = "rware"


class EnvEngine(StrEnum):
    """What steps an ``mpe`` scenario: ``mpe2`` (the reference library, one copy at a time) or
    ``vector`` (``learners/envs/vector``: mpe2's scenarios as array code, equal to it step for
    step)."""

    MPE2 = "mpe2"
    VECTOR = "vector"


class Device(StrEnum):
    """Where a run computes. ``auto`` takes CUDA when the worker has it; ``cuda`` never falls
    back."""

    AUTO = "auto"
    CPU = "cpu"
    CUDA = "cuda"


class ActionKind(StrEnum):
    """The action spaces an algorithm can act in, and an environment offers."""

    CONTINUOUS = "continuous"
    DISCRETE = "discrete"
