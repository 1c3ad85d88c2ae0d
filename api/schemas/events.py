"""The bodies of a run's events as pages (``format=json``) and of its status timeline."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class EventOut(BaseModel):
    """One event of a run."""

    id: int = Field(description="Monotonic id (the SSE `id`): resume after it.")
    kind: str = Field(description="`status`, `progress`, `metrics`, `checkpoint` or `log`.")
    at: str = Field(description="When it was recorded (ISO 8601, UTC).")
    data: dict[str, Any] = Field(description="The event's content (the SSE `data`).")


class EventPage(BaseModel):
    """A page of a run's events, oldest first."""

    items: list[EventOut]
    next_after: int = Field(description="Pass as `after` to read on.")
    more: bool = Field(description="True when further events are already recorded.")
    status: str | None = Field(description="The run's status when the page was read.")
    finished: bool = Field(description="The run is over and this page holds its last events.")


class TransitionOut(BaseModel):
    """One status change."""

    from_status: str | None = Field(description="The status before (null for the first).")
    to_status: str = Field(description="The status after.")
    reason: str | None = Field(description="Why it changed.")
    actor_key_id: str | None = Field(
        description="The key whose request made the change (submit, cancel, resume); null when "
        "a worker or the service made it."
    )
    at: str = Field(description="When (ISO 8601, UTC).")


class Timeline(BaseModel):
    """Every status change of a run, oldest first."""

    items: list[TransitionOut]
