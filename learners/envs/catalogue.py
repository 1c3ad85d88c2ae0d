"""Which environments a spec may name, the checks a spec's ``env`` must pass, and the env factory.

``validate_env`` runs in the API process for every submitted spec, so it never constructs an env: it
reads constructor signatures (cached) and the action kind from the kwargs. ``make_vec_env`` builds
the batched env a run trains on.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from learners.enums import EnvEngine, EnvSuite
from learners.envs.base import VecEnv
from learners.registry import ActionKind, AlgorithmEntry, entries
from learners.spec import FieldError

if TYPE_CHECKING:
    from learners.spec import EnvSpec

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
# checked against the built envs by tests/learners/test_learners_teams.py. ``learners.budget``
# keeps at least one agent on each side, so they hold whatever kwargs a spec passes.
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
# Subprocess stepping (docs/learners.md has the figures): on an idle 2-core machine 8 MPE copies
# stepped 1.6x faster in 2 worker processes than in process, but with the cores busy (the learner,
# other runs, the API) in process was 1.3x faster, and training too. So copies step in worker
# processes only where cores are to spare: at least MIN_CPUS_FOR_SUBPROCESS, one left to the
# learner, and each worker stepping at least SUBPROCESS_MIN_ENVS_PER_WORKER copies.
MIN_CPUS_FOR_SUBPROCESS = 4
SUBPROCESS_MIN_ENVS_PER_WORKER = 4


def env_ids(suite: EnvSuite) -> tuple[str, ...]:
    """The env ids ``suite`` offers."""
    return tuple(GYMNASIUM_ENVS) if suite == EnvSuite.GYMNASIUM else MPE_ENVS


def scenario_teams(suite: EnvSuite, env_id: str) -> tuple[str, ...]:
    """The teams of a catalogued env, in agent order; a Gymnasium env's one agent is ``agent``."""
    return MPE_TEAMS[env_id] if suite == EnvSuite.MPE else ("agent",)


def trains_on(algo_entry: AlgorithmEntry, suite: EnvSuite, env_id: str) -> bool:
    """Whether ``algo_entry`` trains on the catalogued ``env_id`` of one of its suites with some
    kwargs: an action kind it acts in (mpe2 offers both) and teams it can learn for."""
    if suite == EnvSuite.GYMNASIUM and GYMNASIUM_ENVS[env_id] not in algo_entry.action_kinds:
        return False
    return not (algo_entry.one_team and len(scenario_teams(suite, env_id)) > 1)


def _team_errors(suite: EnvSuite, env_id: str, algo_entry: AlgorithmEntry) -> list[FieldError]:
    teams = scenario_teams(suite, env_id)
    if not algo_entry.one_team or len(teams) == 1:
        return []
    cooperative = [i for i in env_ids(suite) if len(scenario_teams(suite, i)) == 1]
    others = [str(e.algorithm).upper() for e in entries() if suite in e.suites and not e.one_team]
    name = str(algo_entry.algorithm).upper()
    count = {2: "two", 3: "three"}.get(len(teams), str(len(teams)))
    reason = (
        f"{name} learns one team reward; {env_id} has {count} teams ({', '.join(teams)}) whose "
        f"rewards oppose, so it would train on their mean, which no team maximises. Train {name} "
        f"on a cooperative scenario ({', '.join(cooperative)}), or {env_id} with "
        f"{_either(others)}"
    )
    return [FieldError("env.id", reason)]


def _either(names: list[str]) -> str:
    """``a, b or c``."""
    return " or ".join(filter(None, [", ".join(names[:-1]), names[-1]]))


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


def _type_error(value: Any, default: Any) -> str | None:
    """Why ``value`` cannot stand in for a parameter whose default is ``default``, or None."""
    if default is inspect.Parameter.empty or default is None:
        return None
    if isinstance(default, bool):
        ok, wanted = isinstance(value, bool), "true or false"
    elif isinstance(default, int):
        ok, wanted = isinstance(value, int) and not isinstance(value, bool), "an integer"
    elif isinstance(default, float):
        ok, wanted = isinstance(value, int | float) and not isinstance(value, bool), "a number"
    elif isinstance(default, str):
        ok, wanted = isinstance(value, str), "a string"
    elif isinstance(default, tuple | list):
        ok, wanted = (
            isinstance(value, list) and len(value) == len(default),
            (f"a list of {len(default)} values"),
        )
    elif isinstance(default, dict):
        ok, wanted = isinstance(value, dict), "an object"
    else:
        return None
    return None if ok else f"must be {wanted}, got {_shown(value)}"


def _shown(value: Any, limit: int = 80) -> str:
    """``value`` as a person reads it, cut short: a refusal never echoes a megabyte back."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def kwarg_errors(suite: EnvSuite, env_id: str, kwargs: Mapping[str, Any]) -> list[FieldError]:
    """Every reason ``kwargs`` cannot be given to the catalogued ``env_id``'s constructor (an
    unknown or reserved name, a value of the wrong type); empty when they can."""
    params = constructor_parameters(suite, env_id)
    errors = []
    for name, value in kwargs.items():
        field = f"env.kwargs.{name}"
        if name in RESERVED_KWARGS:
            errors.append(FieldError(field, RESERVED_KWARGS[name]))
        elif name not in params:
            takes = ", ".join(sorted(n for n in params if n not in RESERVED_KWARGS))
            errors.append(
                FieldError(field, f"{env_id} takes no argument {name!r} (it takes: {takes})")
            )
        elif (reason := _type_error(value, params[name].default)) is not None:
            errors.append(FieldError(field, reason))
    return errors


def action_kind(suite: EnvSuite, env_id: str, kwargs: Mapping[str, Any]) -> ActionKind:
    """The action kind a (validated) env spec gives."""
    if suite == EnvSuite.GYMNASIUM:
        return GYMNASIUM_ENVS[env_id]
    return (
        ActionKind.CONTINUOUS if kwargs.get("continuous_actions") is True else ActionKind.DISCRETE
    )


def validate_env(
    suite: EnvSuite, env_id: str, kwargs: Mapping[str, Any], algo_entry: AlgorithmEntry
) -> list[FieldError]:
    """Every reason the env part of a spec cannot run with ``algo_entry``; empty when it can."""
    if env_id not in env_ids(suite):
        known = ", ".join(env_ids(suite))
        return [FieldError("env.id", f"unknown {suite} environment {env_id!r} (known: {known})")]
    errors = _team_errors(suite, env_id, algo_entry)
    bad_kwargs = kwarg_errors(suite, env_id, kwargs)
    if bad_kwargs:
        return errors + bad_kwargs
    kind = action_kind(suite, env_id, kwargs)
    if kind not in algo_entry.action_kinds:
        needs = " or ".join(sorted(algo_entry.action_kinds))
        if suite == EnvSuite.MPE:
            flag = "true" if ActionKind.CONTINUOUS in algo_entry.action_kinds else "false"
            errors.append(
                FieldError(
                    "env.kwargs.continuous_actions",
                    f"{algo_entry.algorithm} needs {needs} actions: "
                    f"set continuous_actions to {flag}",
                )
            )
        else:
            errors.append(
                FieldError(
                    "env.id", f"{algo_entry.algorithm} needs {needs} actions; {env_id} has {kind}"
                )
            )
    return errors


def engine_errors(env_spec: EnvSpec) -> list[FieldError]:
    """Why ``env_spec.engine`` cannot step ``env_spec``: the vector engine serves mpe scenarios
    only, with the kwargs it models. Empty when it can (or when the env or its kwargs are wrong
    anyway: ``validate_env`` says so)."""
    if env_spec.engine != EnvEngine.VECTOR:
        return []
    if env_spec.suite != EnvSuite.MPE:
        reason = f"the vector engine steps mpe scenarios only, not {env_spec.suite} envs"
        return [FieldError("env.engine", f"{reason}: leave env.engine out or set it to mpe2")]
    if env_spec.id not in MPE_ENVS or kwarg_errors(env_spec.suite, env_spec.id, env_spec.kwargs):
        return []
    # Counts past their bounds (N=5000) are refused by name by learners.budget; building the
    # scenario first would pair every body with every other (minutes, gigabytes) to find out.
    from learners.budget import env_kwarg_errors

    if env_kwarg_errors(env_spec):
        return []
    from learners.envs.vector.engine import build_scenario

    try:
        build_scenario(env_spec.id, dict(env_spec.kwargs))
    except (ValueError, TypeError) as error:
        return [FieldError("env.engine", f"the vector engine cannot run this env: {error}")]
    return []


def default_workers(num_envs: int, cpus: int | None = None) -> int:
    """How many worker processes step ``num_envs`` copies by default (0: in process)."""
    cpus = cpus if cpus is not None else (os.cpu_count() or 1)
    if cpus < MIN_CPUS_FOR_SUBPROCESS:
        return 0
    workers = min(cpus - 1, num_envs // SUBPROCESS_MIN_ENVS_PER_WORKER)
    return workers if workers >= 2 else 0


def _steps_on_vector(env_spec: EnvSpec, render: bool) -> bool:
    """Whether the env steps on the vector engine: asked for, and not rendering (replays render
    on mpe2, which the vector engine equals)."""
    return env_spec.engine == EnvEngine.VECTOR and env_spec.suite == EnvSuite.MPE and not render


def _local_factory(env_spec: EnvSpec, seed: int, render: bool, device: str | None) -> Any:
    from learners.envs.gymnasium_env import GymnasiumVecEnv
    from learners.envs.mpe import MPEVecEnv

    cls: Any = GymnasiumVecEnv if env_spec.suite == EnvSuite.GYMNASIUM else MPEVecEnv
    if _steps_on_vector(env_spec, render):
        from learners.envs.vector.adapter import VectorVecEnv

        return functools.partial(
            VectorVecEnv, env_spec.id, dict(env_spec.kwargs), seed=seed, device=device
        )
    if device is not None:
        raise ValueError("only the vector engine keeps its observations on a device")
    return functools.partial(cls, env_spec.id, dict(env_spec.kwargs), seed=seed, render=render)


def make_vec_env(
    env_spec: EnvSpec,
    seed: int,
    *,
    num_envs: int | None = None,
    render: bool = False,
    workers: int | None = None,
    device: str | None = None,
) -> VecEnv:
    """The batched env ``env_spec`` describes (``num_envs`` overrides the spec's count); episode
    seeds derive from ``seed``. ``workers`` forces stepping in that many processes (0 or 1: in
    process); by default ``default_workers`` decides, and the vector engine, which steps every
    copy at once, steps in process. ``device`` (a torch device, vector engine only) keeps the
    world and the observations there (``learners.training.observation_device`` says when)."""
    count = num_envs if num_envs is not None else env_spec.num_envs
    factory = _local_factory(env_spec, seed, render, device)
    if workers is None:
        workers = 0 if _steps_on_vector(env_spec, render) else default_workers(count)
    if workers <= 1 or render:
        env: VecEnv = factory(count, first_copy=0)
        return env
    from learners.envs.subproc import SubprocVecEnv

    return SubprocVecEnv(factory, count, workers)
