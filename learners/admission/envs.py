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
from learners.enums import ActionKind, EnvEngine, EnvSuite
from learners.envs.catalogue import suite, suite_names
from learners.envs.suites.base import Suite
from learners.envs.suites.mpe import CLASSIC_MPE_ENVS
from learners.registry import AlgorithmEntry, entries
from learners.spec import EnvSpec, FieldError


def _teams(env_suite: Suite, env_id: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(env_suite.entry(env_id).teams))


def trains_on(algo_entry: AlgorithmEntry, suite_name: str, env_id: str) -> bool:
    """Whether ``algo_entry`` trains on ``env_id`` of an installed suite with some kwargs: a suite
    of its kind (single- or multi-agent), an action kind it acts in and teams it can learn for."""
    env_suite = suite(suite_name)
    if env_suite.multi_agent != algo_entry.multi_agent:
        return False
    if not env_suite.entry(env_id).action_kinds & algo_entry.action_kinds:
        return False
    return not (algo_entry.one_team and len(_teams(env_suite, env_id)) > 1)


def suite_errors(suite_name: str, algo_entry: AlgorithmEntry) -> list[FieldError]:
    """Why ``algo_entry`` cannot train in ``suite_name``: no such suite is installed, or it is
    of the other kind (single- or multi-agent)."""
    if suite_name not in suite_names():
        known = ", ".join(suite_names())
        return [FieldError("env.suite", f"no environment suite {suite_name!r} (known: {known})")]
    if suite(suite_name).multi_agent == algo_entry.multi_agent:
        return []
    supported = ", ".join(sorted(algo_entry.suites))
    return [
        FieldError(
            "env.suite",
            f"{algo_entry.algorithm} does not train on {suite_name} environments "
            f"(supported: {supported})",
        )
    ]


def _team_errors(env_suite: Suite, env_id: str, algo_entry: AlgorithmEntry) -> list[FieldError]:
    teams = _teams(env_suite, env_id)
    if not algo_entry.one_team or len(teams) == 1:
        return []
    cooperative = [i for i in env_suite.ids() if len(_teams(env_suite, i)) == 1]
    others = [
        str(e.algorithm).upper() for e in entries() if env_suite.name in e.suites and not e.one_team
    ]
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
        numbers = all(isinstance(d, int | float) and not isinstance(d, bool) for d in default)
        ok = isinstance(value, list) and len(value) == len(default)
        if numbers:
            ok = ok and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
        wanted = f"a list of {len(default)} {'numbers' if numbers else 'values'}"
    elif isinstance(default, dict):
        ok, wanted = isinstance(value, dict), "an object"
    else:
        return None
    return None if ok else f"must be {wanted}, got {_shown(value)}"


def _shown(value: Any, limit: int = 80) -> str:
    """``value`` as a person reads it, cut short: a refusal never echoes a megabyte back."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def kwarg_errors(suite_name: str, env_id: str, kwargs: Mapping[str, Any]) -> list[FieldError]:
    """Every reason ``kwargs`` cannot be given to the catalogued ``env_id``'s constructor (an
    unknown or reserved name, a value of the wrong type); empty when they can."""
    env_suite = suite(suite_name)
    params, reserved = env_suite.parameters(env_id), env_suite.reserved
    errors = []
    for name, value in kwargs.items():
        field = f"env.kwargs.{name}"
        if name in reserved:
            errors.append(FieldError(field, reserved[name]))
        elif name not in params:
            takes = ", ".join(sorted(n for n in params if n not in reserved)) or "none"
            errors.append(
                FieldError(field, f"{env_id} takes no argument {name!r} (it takes: {takes})")
            )
        elif (reason := _type_error(value, params[name].default)) is not None:
            errors.append(FieldError(field, reason))
    return errors


def validate_env(
    suite_name: str, env_id: str, kwargs: Mapping[str, Any], algo_entry: AlgorithmEntry
) -> list[FieldError]:
    """Every reason the env part of a spec cannot run with ``algo_entry``; empty when it can."""
    if suite_name not in suite_names():
        return []  # suite_errors names it
    env_suite = suite(suite_name)
    if env_id not in env_suite.ids():
        known = ", ".join(env_suite.ids())
        reason = f"unknown {suite_name} environment {env_id!r} (known: {known})"
        return [FieldError("env.id", reason)]
    if env_suite.multi_agent != algo_entry.multi_agent:
        return kwarg_errors(suite_name, env_id, kwargs)  # suite_errors names the mismatch
    errors = _team_errors(env_suite, env_id, algo_entry)
    bad_kwargs = kwarg_errors(suite_name, env_id, kwargs)
    if bad_kwargs:
        return errors + bad_kwargs
    kind = env_suite.action_kind(env_id, kwargs)
    if kind not in algo_entry.action_kinds:
        errors.append(_action_kind_error(env_suite, env_id, kind, algo_entry))
    return errors


def _action_kind_error(
    env_suite: Suite, env_id: str, kind: ActionKind, algo_entry: AlgorithmEntry
) -> FieldError:
    needs = " or ".join(sorted(algo_entry.action_kinds))
    flag = env_suite.action_kind_field(env_id)
    if flag is not None:
        value = "true" if ActionKind.CONTINUOUS in algo_entry.action_kinds else "false"
        reason = f"{algo_entry.algorithm} needs {needs} actions: set {flag} to {value}"
        return FieldError(f"env.kwargs.{flag}", reason)
    return FieldError(
        "env.id", f"{algo_entry.algorithm} needs {needs} actions; {env_id} has {kind}"
    )


def engine_errors(env_spec: EnvSpec) -> list[FieldError]:
    """Why ``env_spec.engine`` cannot step ``env_spec``: the vector engine serves mpe scenarios
    only, with the kwargs it models. Empty when it can (or when the env or its kwargs are wrong
    anyway: ``validate_env`` says so)."""
    if env_spec.engine != EnvEngine.VECTOR:
        return []
    if env_spec.suite != EnvSuite.MPE:
        reason = f"the vector engine steps mpe scenarios only, not {env_spec.suite} envs"
        return [FieldError("env.engine", f"{reason}: leave env.engine out or set it to mpe2")]
    if env_spec.id not in suite(env_spec.suite).ids():
        return []  # validate_env names it
    if env_spec.id not in CLASSIC_MPE_ENVS:
        reason = (
            f"the vector engine models {', '.join(CLASSIC_MPE_ENVS)}, not {env_spec.id}: leave "
            "env.engine out or set it to mpe2"
        )
        return [FieldError("env.engine", reason)]
    if kwarg_errors(env_spec.suite, env_spec.id, env_spec.kwargs):
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
