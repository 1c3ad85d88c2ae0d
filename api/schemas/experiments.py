"""The bodies of ``/v1/experiments``: an experiment, its worker and lease, and pages of them."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, Field

from api.schemas.common import Progress
from core.db import utcnow
from core.enums import ExperimentStatus
from core.leases.service import max_restarts_of
from core.models import Experiment
from learners.api import Algorithm, Backend


class LatestMetric(BaseModel):
    """The newest value of one metric."""

    step: int = Field(description="The step it was reported at.")
    value: float | None = Field(description="The value; null when it was not finite (NaN, inf).")


class WorkerOut(BaseModel):
    """The worker that holds (or last held) the run, and how its lease stands."""

    id: str = Field(description="The worker's name (`MARLFORGE_WORKER_NAME`, or `<host>-<pid>`).")
    heartbeat_at: dt.datetime | None = Field(description="When it last renewed its lease.")
    lease_expires_at: dt.datetime | None = Field(
        description="When its hold lapses unless renewed; null once the run left the worker."
    )
    lease: str = Field(
        description="`held`: the worker renews its lease; `silent`: no renewal for a quarter of "
        "the lease or more (a worker stuck or cut off); `lapsed`: the lease ran out and the run "
        "is about to be restarted (or failed, or cancelled); `released`: the run has left it."
    )

    @classmethod
    def of(cls, row: Experiment, now: dt.datetime) -> WorkerOut | None:
        """The worker part of a row (None when no worker ever held it)."""
        if row.worker_id is None:
            return None
        return cls(
            id=row.worker_id,
            heartbeat_at=row.heartbeat_at,
            lease_expires_at=row.lease_expires_at,
            lease=_lease_state(row, now),
        )


def _lease_state(row: Experiment, now: dt.datetime) -> str:
    expires, beat = row.lease_expires_at, row.heartbeat_at
    if expires is None or beat is None:
        return "released"
    if expires <= now:
        return "lapsed"
    return "silent" if now - beat > (expires - beat) / 4 else "held"


class ParentOut(BaseModel):
    """The checkpoint a warm-started or continued run began from (its spec's ``init``,
    resolved)."""

    experiment_id: str = Field(description="The run it started from (of the same project).")
    checkpoint_id: str = Field(
        description="That run's checkpoint, resolved at submission (`latest` and `best` become "
        "an id); kept by that run's pruning while a warm start names it."
    )
    what: str = Field(
        description="`policy` or `all`: what the run took from the checkpoint; `run`: it "
        "continues that run from the checkpoint (a PBT member's round, say)."
    )

    @classmethod
    def of(cls, spec: dict[str, Any]) -> ParentOut | None:
        """The parent a stored spec names, or None for a fresh start."""
        init = spec.get("init")
        if not init:
            return None
        return cls(
            experiment_id=init["experiment_id"],
            checkpoint_id=init["checkpoint_id"],
            what=init.get("what", "policy"),
        )


class ExperimentOut(BaseModel):
    """An experiment: its full spec, status and progress."""

    id: str = Field(description="The experiment's id (a ULID: sorts by creation time).")
    name: str = Field(description="The spec's name.")
    algorithm: Algorithm
    backend: Backend
    status: ExperimentStatus = Field(
        description="pending (a sweep's run waiting for a slot of its sweep), queued, running, "
        "cancelling, cancelled, succeeded or failed."
    )
    status_reason: str | None = Field(
        description="Why the experiment is in this status (a failure's error message, ...). A "
        "queued run whose spec asks for `cuda` while no GPU worker of its backend is registered "
        "says so: `waiting for a GPU worker: no torch worker with a GPU is registered ...` "
        "(worked out at every read: it goes as soon as one registers)."
    )
    progress: Progress
    latest_metrics: dict[str, LatestMetric] = Field(
        description="The newest value of each metric the run reported."
    )
    spec: dict[str, Any] = Field(description="The full spec, every default filled in.")
    attempts: int = Field(description="How many times a worker has started this run.")
    restarts: int = Field(
        description="How many times the run was restarted from its latest checkpoint after its "
        "worker was lost."
    )
    max_restarts: int = Field(
        description="The spec's `max_restarts`: one more lost worker than this fails the run."
    )
    worker: WorkerOut | None = Field(
        description="The worker holding the run (or the last one); null before it first started."
    )
    queue_position: int | None = Field(
        default=None,
        description="A queued run's place among the runs queued on its queue (1: taken next): "
        "its backend's queue, or its GPU queue for a spec asking for `cuda`, in the fair order "
        "across projects (runs the service interrupted first, then the project with the fewest "
        "runs on the queue's workers, then the one that started a run least recently, then the "
        "first queued). In the responses about one experiment; null in lists and in other "
        "statuses.",
    )
    sweep_id: str | None = Field(
        default=None, description="The sweep the run belongs to; null for a run of its own."
    )
    sweep_config: str | None = Field(
        default=None, description="Its configuration's key within that sweep (`c0`, `c1`...)."
    )
    parent: ParentOut | None = Field(
        default=None,
        description="The run and checkpoint it warm-started from (`spec.init`); null for a "
        "fresh start.",
    )
    created_by_key_id: str | None = Field(
        description="The key that submitted it (null for runs from before keys existed)."
    )
    created_at: dt.datetime
    updated_at: dt.datetime
    started_at: dt.datetime | None = Field(description="When a worker first started the run.")
    finished_at: dt.datetime | None = Field(description="When it reached its final status.")
    device: str | None = Field(
        default=None,
        description="The device the run computes on, as its worker resolved the spec's `device` "
        "when it last started the run: `cpu`, or `cuda:<index> (<GPU name>)` (`auto` on a GPU "
        "worker is the GPU); null until a worker started it.",
    )
    compacted_at: dt.datetime | None = Field(
        description="When its history was compacted, some time after it finished (the "
        "deployment's retention): its `progress` and `metrics` events are gone and each metric "
        "series keeps at most the retention's points, the 500-point chart exactly as it was; "
        "null until then."
    )

    @classmethod
    def of(
        cls, row: Experiment, queue_position: int | None = None, status_reason: str | None = None
    ) -> ExperimentOut:
        """The response for a database row; ``status_reason`` as
        ``core.fleet.registry.status_reasons`` has it (the stored one when None)."""
        return cls(
            id=row.id,
            name=row.name,
            algorithm=row.algorithm,
            backend=row.backend,
            status=row.status,
            status_reason=status_reason if status_reason is not None else row.status_reason,
            progress=Progress.of(row.step, row.total_steps),
            latest_metrics={k: LatestMetric(**v) for k, v in (row.latest_metrics or {}).items()},
            spec=row.spec,
            attempts=row.attempts,
            restarts=row.restarts,
            max_restarts=max_restarts_of(row),
            worker=WorkerOut.of(row, utcnow()),
            queue_position=queue_position,
            sweep_id=row.sweep_id,
            sweep_config=row.sweep_config,
            parent=ParentOut.of(row.spec or {}),
            created_by_key_id=row.created_by_key_id,
            created_at=row.created_at,
            updated_at=row.updated_at,
            started_at=row.started_at,
            finished_at=row.finished_at,
            device=row.device,
            compacted_at=row.compacted_at,
        )


class ExperimentPage(BaseModel):
    """A page of experiments, newest first."""

    items: list[ExperimentOut]
    next_after: str | None = Field(
        description="Pass as `after` to get the next page; null on the last page."
    )
