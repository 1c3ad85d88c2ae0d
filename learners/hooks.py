"""The narrow interface between a training run and whoever hosts it (the Celery worker, benchmarks).

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


class MemoryHooks:
    """``TrainingHooks`` that keep what a run reports in memory: for tests, benchmarks and scripts.

    Checkpoints are written to ``checkpoint_dir`` as ``step-<step>.safetensors`` (or only noted when
    it is None). ``stop_after`` makes ``should_stop`` answer True from its ``stop_after``-th call,
    which stops a run after that many iterations.
    """

    def __init__(self, checkpoint_dir: Path | None = None, stop_after: int | None = None) -> None:
        self.checkpoint_dir = checkpoint_dir
        self.stop_after = stop_after
        self.points: list[MetricPoint] = []
        self.metric_batches = 0
        self.progress_steps: list[int] = []
        self.checkpoints: list[tuple[int, Path | None]] = []
        self.logs: list[tuple[str, str]] = []
        self.stop_checks = 0

    def metrics(self, points: Sequence[MetricPoint]) -> None:
        self.points.extend(points)
        self.metric_batches += 1

    def progress(self, step: int) -> None:
        self.progress_steps.append(step)

    def checkpoint(self, step: int, write: Callable[[Path], None]) -> None:
        path = None
        if self.checkpoint_dir is not None:
            path = self.checkpoint_dir / f"step-{step:012d}.safetensors"
            write(path)
        self.checkpoints.append((step, path))

    def should_stop(self) -> bool:
        self.stop_checks += 1
        return self.stop_after is not None and self.stop_checks >= self.stop_after

    def log(self, level: str, message: str) -> None:
        self.logs.append((level, message))

    def series(self, name: str) -> list[tuple[int, float]]:
        """The (step, value) points of metric ``name``, in the order they came."""
        return [(p.step, p.value) for p in self.points if p.name == name]
