"""The API's response bodies (requests are specs, validated by ``learners.spec.parse_spec``)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, Field

from core.db import utcnow
from core.enums import ExperimentStatus, ResourceClass
from core.leases import max_restarts_of
from core.models import Checkpoint, Experiment, MetricPointRow, WorkerRecord
from learners.api import Algorithm, Backend


class Progress(BaseModel):
    """How far the run has trained."""

    step: int = Field(description="Environment steps taken so far (over all parallel envs).")
    total_steps: int = Field(description="The budget in environment steps.")
    fraction: float = Field(description="`step / total_steps`, between 0 and 1.")

    @classmethod
    def of(cls, step: int, total_steps: int) -> Progress:
        """The progress of ``step`` out of ``total_steps`` (a fraction of 0 without a budget)."""
        fraction = min(1.0, step / total_steps) if total_steps else 0.0
        return cls(step=step, total_steps=total_steps, fraction=fraction)


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
        "its backend's queue, or its GPU queue for a spec asking for `cuda`. In the responses "
        "about one experiment; null in lists and in other statuses.",
    )
    sweep_id: str | None = Field(
        default=None, description="The sweep the run belongs to; null for a run of its own."
    )
    sweep_config: str | None = Field(
        default=None, description="Its configuration's key within that sweep (`c0`, `c1`...)."
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
        """The response for a database row; ``status_reason`` as ``core.registry.status_reasons``
        has it (the stored one when None)."""
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


class MetricPointOut(BaseModel):
    """One metric value."""

    step: int = Field(description="Environment step it was measured at.")
    wall_time: float = Field(description="Seconds since the Unix epoch when it was measured.")
    name: str = Field(description="The metric's name, e.g. `eval/episode_return`.")
    value: float | None = Field(description="The value; null when it was not finite (NaN, inf).")

    @classmethod
    def of(cls, row: MetricPointRow) -> MetricPointOut:
        """The response for a database row."""
        return cls(step=row.step, wall_time=row.wall_time, name=row.name, value=row.value)


class MetricPage(BaseModel):
    """Metric points ordered by step, then name. A page never splits one step's points."""

    items: list[MetricPointOut]
    next_after_step: int | None = Field(
        description="Pass as `after_step` to get the next page; null on the last page."
    )


class CheckpointOut(BaseModel):
    """A stored checkpoint of the run."""

    id: str
    step: int = Field(description="The environment step it was taken at.")
    size_bytes: int
    sha256: str = Field(description="Hex SHA-256 of the file (also its download's ETag).")
    created_at: dt.datetime
    eval_return: float | None = Field(
        description="The run's `eval/episode_return` at this step; null when no evaluation was "
        "taken at its step."
    )
    best: bool = Field(
        description="The run's best checkpoint: the highest `eval_return` (the earliest of equal "
        "ones); kept beside the newest `keep_last` when `checkpoint.keep_best` is on. Also at "
        "`checkpoints/best/file`."
    )

    @classmethod
    def of(cls, row: Checkpoint, best_id: str | None = None) -> CheckpointOut:
        """The response for a database row (``best_id``: the run's best checkpoint)."""
        return cls(
            id=row.id,
            step=row.step,
            size_bytes=row.size_bytes,
            sha256=row.sha256,
            created_at=row.created_at,
            eval_return=row.eval_return,
            best=row.id == best_id,
        )


class CheckpointList(BaseModel):
    """The run's kept checkpoints, oldest first."""

    items: list[CheckpointOut]


class Health(BaseModel):
    """Liveness and readiness."""

    status: str = Field(description="`ok`, or `unavailable` when a dependency is down.")
    checks: dict[str, str] = Field(
        default_factory=dict, description="Each dependency: `ok` or why it is not."
    )


class RegisteredWorkerOut(BaseModel):
    """A worker of the registry, for one backend whose queues it consumes (a worker of several
    backends is one item per backend). Only what the worker says about itself: never its
    settings, URLs or environment."""

    id: str = Field(description="The worker's name (`MARLFORGE_WORKER_NAME`, or `<host>-<pid>`).")
    hostname: str = Field(description="The host it runs on.")
    backend: Backend
    resource_class: ResourceClass = Field(
        description="`gpu` when it consumes the backend's GPU queue (`marlforge worker --gpu` on "
        "a host whose framework sees a GPU), else `cpu`."
    )
    queues: list[str] = Field(
        description="The broker queues of this backend it consumes, in the order it reads them "
        "(a GPU worker's `<backend>-gpu` queue first)."
    )
    gpus: list[str] = Field(
        description="The names of the GPUs the backend's framework sees there (`[]` for `cpu`)."
    )
    started_at: dt.datetime = Field(description="When the worker started.")
    last_seen_at: dt.datetime = Field(description="Its latest heartbeat.")
    live: bool = Field(
        description="Seen within `MARLFORGE_WORKER_HEARTBEAT_STALE_S` (`stale_after_s`): it "
        "takes runs. A worker that stopped cleanly has no row; one that was killed keeps a "
        "stale row (`false`) for a day."
    )

    @classmethod
    def of(cls, row: WorkerRecord, live_since: dt.datetime) -> RegisteredWorkerOut:
        """The response for a database row; live when it was seen at or after ``live_since``."""
        return cls(
            id=row.id,
            hostname=row.hostname,
            backend=row.backend,
            resource_class=row.resource_class,
            queues=[str(q) for q in row.queues],
            gpus=[str(g) for g in row.gpus],
            started_at=row.started_at,
            last_seen_at=row.last_seen_at,
            live=row.last_seen_at >= live_since,
        )


class WorkerList(BaseModel):
    """The workers the registry holds, by id and backend (not paged: a row per worker and
    backend, and rows not seen for a day are deleted)."""

    items: list[RegisteredWorkerOut]
    stale_after_s: float = Field(
        description="`MARLFORGE_WORKER_HEARTBEAT_STALE_S`: a worker not seen for this long is "
        "not live."
    )
