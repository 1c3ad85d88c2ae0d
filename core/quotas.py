"""Limits a submission must keep to, with this deployment's settings: the spec's own bounds, and
the project's quotas (``check_project_limits``: runs queued or running, submissions per minute).

``check_spec_bounds`` runs after ``learners.spec.parse_spec``: the structural bounds and the memory
estimate of ``learners.admission.budget``, the estimate judged against ``Settings.run_memory_mb``
(``MARLFORGE_RUN_MEMORY_MB``). It raises ``SpecError`` like ``parse_spec`` does, so the submission
route answers both alike (422 ``invalid_spec`` with ``error.fields``). ``run_memory_estimate`` gives
the estimate alone, for a route or page that shows it.
"""

from __future__ import annotations

import datetime as dt
import math
import os

from pydantic import ValidationError
from sqlalchemy.orm import Session

from core.auth.repository import ProjectRepository
from core.db import utcnow
from core.enums import ExperimentStatus
from core.errors import QuotaExceeded
from core.experiments.checkpoints import CheckpointRepository
from core.experiments.repository import ExperimentRepository
from core.matches.repository import MatchRepository
from core.models import Experiment
from core.settings import Settings
from core.sweeps.repository import SweepRepository
from learners.api import (
    Assessment,
    ExperimentSpec,
    FieldError,
    MemoryEstimate,
    SpecError,
    assess,
)


def _variable(field: str) -> str:
    """The environment variable that sets ``Settings.<field>``, for a refusal's reason."""
    return f"{Settings.model_config.get('env_prefix', '')}{field.upper()}"


MIB = 2**20

BUDGET_VARIABLE = _variable("run_memory_mb")
"""The environment variable that sets the per-run budget, for the refusal's reason."""


def _worker_cpus() -> int:
    # How many env worker processes a run starts depends on its worker's cores. The API's host
    # stands in for the worker's: the compose files run both on one host, where a container
    # sees the host's cores. A worker on a larger machine may start more (90 MiB each).
    return os.cpu_count() or 1


def _assess(spec: ExperimentSpec, settings: Settings) -> Assessment:
    return assess(spec, settings.run_memory_mb, cpus=_worker_cpus(), budget_name=BUDGET_VARIABLE)


def check_spec_bounds(spec: ExperimentSpec, settings: Settings) -> None:
    """Raise ``SpecError`` naming every field of ``spec`` past a limit: a structural bound, the
    memory estimate over ``settings.run_memory_mb``, or the checkpoints it would write or keep
    (``checkpoint_errors``)."""
    assessment = _assess(spec, settings)
    errors = list(assessment.errors)
    if assessment.estimate is not None:
        errors += checkpoint_errors(spec, assessment.estimate, settings)
    if errors:
        raise SpecError(errors)


SAVED_BUFFERS = ("replay buffer", "episode buffer")
"""The estimate's buffers a checkpoint holds (an off-policy run resumes with its replay; an
on-policy run's rollout is collected afresh)."""


def checkpoint_mib(estimate: MemoryEstimate) -> float:
    """The estimated size of one checkpoint: the networks (with their optimizers' state, which
    the estimate counts with them) and the saved buffer."""
    return sum(p.mib for p in estimate.parts if p.name == "networks" or p.name in SAVED_BUFFERS)


def checkpoint_errors(
    spec: ExperimentSpec, estimate: MemoryEstimate, settings: Settings
) -> list[FieldError]:
    """The checkpoint fields of ``spec`` past this deployment's storage limits: more writes than
    ``settings.run_max_checkpoints``, or more estimated MiB kept at once than
    ``settings.run_max_checkpoint_mb``."""
    errors: list[FieldError] = []
    every, most = spec.checkpoint.every_steps, settings.run_max_checkpoints
    writes = math.ceil(spec.total_steps / every)
    if writes > most:
        errors.append(
            FieldError(
                "checkpoint.every_steps",
                f"the run would write {writes:,} checkpoints (total_steps {spec.total_steps:,} / "
                f"every_steps {every:,}), more than this deployment's limit of {most:,} "
                f"({_variable('run_max_checkpoints')}); save every "
                f"{math.ceil(spec.total_steps / most):,} steps or more",
            )
        )
    kept = spec.checkpoint.keep_last + int(spec.checkpoint.keep_best)
    size, limit = checkpoint_mib(estimate), settings.run_max_checkpoint_mb
    if kept * size > limit:
        fit = max(1, int(limit // size) - int(spec.checkpoint.keep_best)) if size else kept
        errors.append(
            FieldError(
                "checkpoint.keep_last",
                f"the run would keep {kept:,} checkpoints of about {size:,.0f} MiB, "
                f"{kept * size:,.0f} MiB, more than this deployment's limit of {limit:,} MiB "
                f"({_variable('run_max_checkpoint_mb')}); keep at most {fit:,}",
            )
        )
    return errors


def run_memory_estimate(spec: ExperimentSpec, settings: Settings) -> MemoryEstimate | None:
    """The estimate of the memory ``spec``'s run needs, in parts; ``None`` when the spec is past a
    structural bound (its env's sizes are then not worked out)."""
    return _assess(spec, settings).estimate


# Per-project limits, checked when a project submits, so that one project (or one runaway script)
# cannot fill the queue every team's runs wait in.

ACTIVE_STATUSES = (ExperimentStatus.QUEUED, ExperimentStatus.RUNNING, ExperimentStatus.CANCELLING)
RATE_WINDOW = dt.timedelta(seconds=60)


def check_project_limits(
    session: Session, project_id: str, settings: Settings, *, needs_slot: bool = True
) -> None:
    """Raise ``QuotaExceeded`` when the project may not submit (or resume) a run now: it has
    ``settings.project_max_active_runs`` runs queued or running (only when the submission
    ``needs_slot``: a sweep's runs wait ``pending`` for one instead), or it submitted
    ``settings.project_submissions_per_minute`` things in the last 60 seconds (``_check_rate``)."""
    ProjectRepository(session).lock(project_id)
    experiments = ExperimentRepository(session)
    if needs_slot:
        active = experiments.count_active(project_id, ACTIVE_STATUSES)
        if active >= settings.project_max_active_runs:
            raise QuotaExceeded(
                f"the project has {active} runs queued or running, its limit "
                f"({_variable('project_max_active_runs')}={settings.project_max_active_runs}); "
                "cancel one or wait for one to finish"
            )
    _check_rate(session, project_id, settings)


def kept_checkpoint_mib(spec: ExperimentSpec, settings: Settings) -> float:
    """The estimated MiB of the checkpoints ``spec``'s run keeps at once (``keep_last``, and the
    best with ``keep_best``)."""
    estimate = _assess(spec, settings).estimate
    if estimate is None:
        return 0.0
    return (spec.checkpoint.keep_last + int(spec.checkpoint.keep_best)) * checkpoint_mib(estimate)


def resumed_checkpoint_mib(session: Session, experiment: Experiment, settings: Settings) -> float:
    """What resuming ``experiment`` may add to its project's checkpoints: its estimated kept
    ones less what it stores already (0 for a stored spec this code no longer reads)."""
    try:
        spec = ExperimentSpec.model_validate(experiment.spec)
    except ValidationError:
        return 0.0
    own = CheckpointRepository(session).run_bytes(experiment.id) / MIB
    return max(0.0, kept_checkpoint_mib(spec, settings) - own)


def check_project_storage(
    session: Session, project_id: str, wanted_mib: float, settings: Settings
) -> None:
    """Raise ``QuotaExceeded`` when the project's recorded checkpoints and ``wanted_mib`` more
    (the submission's runs', ``kept_checkpoint_mib``) would pass
    ``settings.project_max_artifact_mb``. Each run is held to it again as it writes
    (``workers.runs.hooks``)."""
    used = CheckpointRepository(session).project_bytes(project_id) / MIB
    limit = settings.project_max_artifact_mb
    if used + wanted_mib > limit:
        raise QuotaExceeded(
            f"the project keeps {used:,.0f} MiB of checkpoints and this would keep about "
            f"{wanted_mib:,.0f} MiB more, past its limit "
            f"({_variable('project_max_artifact_mb')}={limit:,} MiB); keep fewer checkpoints "
            "(checkpoint.keep_last) or ask an operator to raise the limit"
        )


def check_match_limits(session: Session, project_id: str, settings: Settings) -> None:
    """Raise ``QuotaExceeded`` when the project may not start a match now: it has
    ``settings.project_max_active_matches`` matches queued or playing, or it is over its
    submission rate (``_check_rate``)."""
    ProjectRepository(session).lock(project_id)
    active = MatchRepository(session).count_active(project_id)
    if active >= settings.project_max_active_matches:
        raise QuotaExceeded(
            f"the project has {active} matches queued or playing, its limit "
            f"({_variable('project_max_active_matches')}={settings.project_max_active_matches}); "
            "cancel one or wait for one to finish"
        )
    _check_rate(session, project_id, settings)


def _check_rate(session: Session, project_id: str, settings: Settings) -> None:
    """Raise ``QuotaExceeded`` when the project submitted ``project_submissions_per_minute``
    experiments, sweeps, matches and resumes in the last 60 seconds (a sweep counts once, its runs
    not at all)."""
    now = utcnow()
    since = now - RATE_WINDOW
    experiments = ExperimentRepository(session)
    recent = sorted(
        experiments.created_since(project_id, since)
        + experiments.resumed_since(project_id, since)
        + SweepRepository(session).created_since(project_id, since)
        + MatchRepository(session).created_since(project_id, since)
    )
    if len(recent) >= settings.project_submissions_per_minute:
        # A slot frees when the oldest submission of the window leaves it.
        oldest = recent[-settings.project_submissions_per_minute]
        retry_after = max(1, math.ceil((oldest + RATE_WINDOW - now).total_seconds()))
        raise QuotaExceeded(
            f"the project submitted {len(recent)} experiments, sweeps, matches or resumes in the "
            f"last 60 s, its limit ({_variable('project_submissions_per_minute')}="
            f"{settings.project_submissions_per_minute}); retry in {retry_after} s",
            retry_after_s=retry_after,
        )
