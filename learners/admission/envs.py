"""Whether a spec's ``env`` may run with its algorithm: the id exists, the kwargs are ones its
constructor takes with values of the right type, the action kind and the teams suit the algorithm,
and the vector engine models the scenario.

``validate_env`` runs in the API process for every submitted spec, so it never constructs an env:
it reads constructor signatures (cached) and the action kind from the kwargs.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from learners.admission.budget import env_kwarg_errors
from learners.enums import EnvEngine, EnvSuite
from learners.envs.catalogue import (
    GYMNASIUM_ENVS,
    MPE_ENVS,
    RESERVED_KWARGS,
    action_kind,
    constructor_parameters,
    env_ids,
    scenario_teams,
)
from learners.registry import ActionKind, AlgorithmEntry, entries
from learners.spec import EnvSpec, FieldError


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
    # Counts past their bounds (N=5000) are refused by name by learners.admission.budget;
    # building the scenario first would pair every body with every other (minutes, gigabytes).
    if env_kwarg_errors(env_spec):
        return []
    from learners.envs.vector.engine import build_scenario

    try:
        build_scenario(env_spec.id, dict(env_spec.kwargs))
    except (ValueError, TypeError) as error:
        return [FieldError("env.engine", f"the vector engine cannot run this env: {error}")]
    return []
