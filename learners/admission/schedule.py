"""Whether a spec's ``schedule`` may run: each change names only the algorithm's mutable
hyperparameters (``AlgorithmConfig.mutable_fields``), falls between two updates, and leaves a
valid config at every step.

A change takes effect between iterations of the runner (``learners.runners.base.Loop``): after a
rollout and its update on policy, after one step of every copy off policy. ``iteration_steps``
says how many env steps one iteration takes, and a change's ``at_step`` must be a multiple of it,
so that a run continued from a checkpoint at that step (``init.what: run``) and one run that
changes there take their updates at the same steps.
"""

from __future__ import annotations

import json

from pydantic import ValidationError

from learners.registry import RunnerKind, entry
from learners.spec import ExperimentSpec, FieldError, errors_from_validation


def iteration_steps(spec: ExperimentSpec) -> int:
    """The env steps of one iteration of the spec's runner (all copies together)."""
    algo = entry(spec.algorithm)
    if algo.runner == RunnerKind.ON_POLICY:
        rollout = int(spec.config().model_dump()["rollout_length"])
        return spec.env.num_envs * rollout
    return spec.env.num_envs


def mutable_names(spec: ExperimentSpec) -> tuple[str, ...]:
    """The hyperparameters a run of ``spec``'s algorithm may change while it trains."""
    return entry(spec.algorithm).config.mutable_fields


def schedule_errors(spec: ExperimentSpec) -> list[FieldError]:
    """Why ``spec.schedule`` cannot run (``[]`` when it can)."""
    if not spec.schedule:
        return []
    errors: list[FieldError] = []
    mutable = mutable_names(spec)
    every = iteration_steps(spec)
    config = entry(spec.algorithm).config
    values = dict(spec.hyperparameters)
    previous = 0
    for i, change in enumerate(spec.schedule):
        at = f"schedule.{i}"
        if change.at_step <= previous:
            errors.append(FieldError(f"{at}.at_step", "the changes' steps must increase"))
        if change.at_step >= spec.total_steps:
            reason = f"must be below total_steps ({spec.total_steps:,})"
            errors.append(FieldError(f"{at}.at_step", reason))
        if change.at_step % every:
            reason = (
                f"must be a multiple of {every:,}, the env steps between two updates of this run "
                "(env.num_envs x rollout_length on policy, env.num_envs off policy)"
            )
            errors.append(FieldError(f"{at}.at_step", reason))
        previous = change.at_step
        fixed = [name for name in change.hyperparameters if name not in mutable]
        for name in fixed:
            known = name in config.model_fields
            what = "cannot change during a run" if known else "is not a hyperparameter"
            reason = (
                f"{what} of {spec.algorithm}; a schedule may change "
                f"{', '.join(mutable) or 'nothing'}"
            )
            errors.append(FieldError(f"{at}.hyperparameters.{name}", reason))
        if fixed:
            continue
        values.update(change.hyperparameters)
        try:
            config.model_validate_json(json.dumps(values), strict=True)
        except ValidationError as exc:
            errors.extend(errors_from_validation(exc, f"{at}.hyperparameters"))
    return errors
