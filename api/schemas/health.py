"""The body of ``/healthz`` and ``/readyz``."""

from __future__ import annotations

from pydantic import BaseModel, Field


class Health(BaseModel):
    """Liveness and readiness."""

    status: str = Field(description="`ok`, or `unavailable` when a dependency is down.")
    checks: dict[str, str] = Field(
        default_factory=dict, description="Each dependency: `ok` or why it is not."
    )
