"""The bodies of a run's outputs: metric points and checkpoints (``api.routes.artifacts``)."""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel, Field

from core.models import Checkpoint, MetricPointRow


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
