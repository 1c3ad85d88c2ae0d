"""Warm starts at submission: resolving a spec's ``init`` to one stored checkpoint of the project.

A spec's ``init`` names a run of the same project and one of its checkpoints (``latest``, ``best``
or an id). Before anything is stored, ``resolve`` finds the run and the checkpoint, checks the
spec's fit to that run's (``learners.admission.warm_fit``: the algorithm, the env's spaces, the
network hyperparameters; for ``what: run``, a continuation, that the spec describes that run up
to the checkpoint's step) and returns the spec with the checkpoint's id in place of ``latest`` or
``best``, so the stored spec names exactly what the run starts from; each refusal is a
``SpecError`` naming the field. ``columns`` gives the experiment row's copy of the link, which
keeps that checkpoint from its run's pruning (``CheckpointRepository.beyond``) and lets a record
link to its parent. The worker fetches the checkpoint when the run first starts
(``workers.runs.warm_start``).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from core.experiments.checkpoints import CheckpointRepository
from core.experiments.repository import ExperimentRepository
from learners.api import (
    ExperimentSpec,
    FieldError,
    SpecError,
    continue_fit_errors,
    init_fit_errors,
)


def resolve(session: Session, project_id: str, spec: ExperimentSpec) -> ExperimentSpec:
    """``spec`` with its ``init`` resolved to a checkpoint id (unchanged without ``init``), or
    ``SpecError`` when the run or checkpoint is not the project's or the spec does not fit it."""
    init = spec.init
    if init is None:
        return spec
    parent = ExperimentRepository(session).get(init.experiment_id)
    if parent is None or parent.project_id != project_id:
        reason = f"no experiment {init.experiment_id} in this project"
        raise SpecError([FieldError("init.experiment_id", reason)])
    checkpoints = CheckpointRepository(session)
    if init.checkpoint_id == "latest":
        row = checkpoints.latest(parent.id)
        missing = f"experiment {parent.id} has no checkpoint yet"
    elif init.checkpoint_id == "best":
        row = checkpoints.best(parent.id)
        missing = (
            f"experiment {parent.id} has no checkpoint with an evaluation return yet (best is "
            "the checkpoint of the highest one)"
        )
    else:
        row = checkpoints.get(parent.id, init.checkpoint_id)
        missing = (
            f"experiment {parent.id} has no checkpoint {init.checkpoint_id} (it may have been "
            "pruned: only the newest checkpoint.keep_last and the best are kept)"
        )
    if row is None:
        raise SpecError([FieldError("init.checkpoint_id", missing)])
    try:
        parent_spec = ExperimentSpec.model_validate(parent.spec)
        if init.what == "run":
            errors = continue_fit_errors(parent_spec, spec, row.step)
        else:
            errors = init_fit_errors(parent_spec, spec)
    except (ValidationError, ValueError, TypeError) as exc:
        # A stored spec this code no longer reads, or an env that refuses its kwargs now.
        reason = f"experiment {parent.id}'s spec cannot be checked against this one: {exc}"
        raise SpecError([FieldError("init.experiment_id", reason)]) from None
    if errors:
        raise SpecError(errors)
    return spec.model_copy(update={"init": init.model_copy(update={"checkpoint_id": row.id})})


def columns(spec: dict[str, Any]) -> dict[str, str | None]:
    """The experiment row's copy of a resolved spec's ``init``."""
    init = spec.get("init") or {}
    return {
        "init_experiment_id": init.get("experiment_id"),
        "init_checkpoint_id": init.get("checkpoint_id"),
    }
