"""Limits a spec must keep to when it is submitted, with this deployment's settings.

``check_spec_bounds`` runs after ``learners.spec.parse_spec``: the structural bounds and the memory
estimate of ``learners.budget``, the estimate judged against ``Settings.run_memory_mb``
(``MARLFORGE_RUN_MEMORY_MB``). It raises ``SpecError`` like ``parse_spec`` does, so the submission
route answers both alike (422 ``invalid_spec`` with ``error.fields``). ``run_memory_estimate`` gives
the estimate alone, for a route or page that shows it.
"""

from __future__ import annotations

import os

from core.settings import Settings
from learners.budget import Assessment, assess
from learners.memory import MemoryEstimate
from learners.spec import ExperimentSpec, SpecError

BUDGET_VARIABLE = f"{Settings.model_config.get('env_prefix', '')}RUN_MEMORY_MB"
"""The environment variable that sets the per-run budget, for the refusal's reason."""


def _worker_cpus() -> int:
    # How many env worker processes a run starts depends on its worker's cores. The API's host
    # stands in for the worker's: the compose files run both on one host, where a container
    # sees the host's cores. A worker on a larger machine may start more (90 MiB each).
    return os.cpu_count() or 1


def _assess(spec: ExperimentSpec, settings: Settings) -> Assessment:
    return assess(spec, settings.run_memory_mb, cpus=_worker_cpus(), budget_name=BUDGET_VARIABLE)


def check_spec_bounds(spec: ExperimentSpec, settings: Settings) -> None:
    """Raise ``SpecError`` naming every field of ``spec`` past a limit: a structural bound, or the
    memory estimate over ``settings.run_memory_mb``."""
    errors = _assess(spec, settings).errors
    if errors:
        raise SpecError(errors)


def run_memory_estimate(spec: ExperimentSpec, settings: Settings) -> MemoryEstimate | None:
    """The estimate of the memory ``spec``'s run needs, in parts; ``None`` when the spec is past a
    structural bound (its env's sizes are then not worked out)."""
    return _assess(spec, settings).estimate
