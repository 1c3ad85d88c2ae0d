"""The narrow interface between a training run and whoever hosts it (the Celery worker, a benchmark).

The learners library reports through these hooks and knows nothing of databases, brokers or HTTP.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class MetricPoint:
    """One scalar of a run: ``name`` at env step ``step``, ``wall_time`` seconds since the epoch."""

    step: int
    wall_time: float
    name: str
    value: float


class TrainingHooks(Protocol):
    """What a training run calls while it trains. Implementations must be cheap to call often."""

    def metrics(self, points: Sequence[MetricPoint]) -> None:
        """A batch of new metric points (written together, never one transaction per scalar)."""

    def progress(self, step: int) -> None:
        """The run has taken ``step`` environment steps in total."""

    def checkpoint(self, step: int, write: Callable[[Path], None]) -> None:
        """Persist a checkpoint taken at ``step``: call ``write(path)`` to write the file's bytes to
        ``path`` (a temporary file the host then fsyncs, renames and records)."""

    def should_stop(self) -> bool:
        """True once the run has been asked to stop (cancel); checked every iteration."""

    def log(self, level: str, message: str) -> None:
        """A message for the people watching the run (``info``, ``warning`` or ``error``)."""
