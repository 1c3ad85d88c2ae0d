"""Bodies shared by several domains."""

from __future__ import annotations

from pydantic import BaseModel, Field


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
