"""The API's response bodies (requests are specs, validated by ``learners.spec.parse_spec``)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, Field

from core.enums import ExperimentStatus
from core.models import Checkpoint, Experiment, MetricPointRow
from learners.enums import Algorithm, Backend


class Progress(BaseModel):
    """How far the run has trained."""

    step: int = Field(description="Environment steps taken so far (over all parallel envs).")
    total_steps: int = Field(description="The budget in environment steps.")
    fraction: float = Field(description="`step / total_steps`, between 0 and 1.")


class LatestMetric(BaseModel):
    """The newest value of one metric."""

    step: int = Field(description="The step it was reported at.")
    value: float | None = Field(description="The value; null when it was not finite (NaN, inf).")


class ExperimentOut(BaseModel):
    """An experiment: its full spec, status and progress."""

    id: str = Field(description="The experiment's id (a ULID: sorts by creation time).")
    name: str = Field(description="The spec's name.")
    algorithm: Algorithm
    backend: Backend
    status: ExperimentStatus = Field(
        description="queued, running, cancelling, cancelled, succeeded or failed."
    )
    status_reason: str | None = Field(
        description="Why the experiment is in this status (a failure's error message, ...)."
    )
    progress: Progress
    latest_metrics: dict[str, LatestMetric] = Field(
        description="The newest value of each metric the run reported."
    )
    spec: dict[str, Any] = Field(description="The full spec, every default filled in.")
    attempts: int = Field(description="How many times a worker has started this run.")
    created_by_key_id: str | None = Field(
        description="The key that submitted it (null for runs from before keys existed)."
    )
    created_at: dt.datetime
    updated_at: dt.datetime
    started_at: dt.datetime | None = Field(description="When a worker first started the run.")
    finished_at: dt.datetime | None = Field(description="When it reached its final status.")

    @classmethod
    def of(cls, row: Experiment) -> ExperimentOut:
        """The response for a database row."""
        fraction = min(1.0, row.step / row.total_steps) if row.total_steps else 0.0
        return cls(
            id=row.id,
            name=row.name,
            algorithm=row.algorithm,
            backend=row.backend,
            status=row.status,
            status_reason=row.status_reason,
            progress=Progress(step=row.step, total_steps=row.total_steps, fraction=fraction),
            latest_metrics={k: LatestMetric(**v) for k, v in (row.latest_metrics or {}).items()},
            spec=row.spec,
            attempts=row.attempts,
            created_by_key_id=row.created_by_key_id,
            created_at=row.created_at,
            updated_at=row.updated_at,
            started_at=row.started_at,
            finished_at=row.finished_at,
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

    @classmethod
    def of(cls, row: Checkpoint) -> CheckpointOut:
        """The response for a database row."""
        return cls(
            id=row.id,
            step=row.step,
            size_bytes=row.size_bytes,
            sha256=row.sha256,
            created_at=row.created_at,
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
