"""The bodies of ``/v1/metrics``: the metric series of several runs."""

from __future__ import annotations

from pydantic import BaseModel, Field


class Series(BaseModel):
    """One metric of one run, ordered by step (the two lists have the same length)."""

    experiment_id: str
    name: str
    total_points: int = Field(
        description="How many points the run reported (before shrinking); of a compacted run "
        "(`compacted_at`), how many it kept."
    )
    steps: list[int] = Field(description="Environment steps.")
    values: list[float | None] = Field(description="The values; null where not finite.")


class SeriesSet(BaseModel):
    """Series of several runs, and where to start their event streams to stay current."""

    series: list[Series]
    event_cursors: dict[str, int] = Field(
        description="Per run: the newest event id before the points were read. Stream the run's "
        "events after it (`?after=`) to receive every point added since (some again)."
    )
