"""The worker's side of ``learners.hooks.TrainingHooks``: a run's reports go to the database.

The learner may call these hooks every iteration; they buffer in memory and write at most once per
``poll_interval_s`` (one transaction for the metrics batch, the progress, the log lines and their
events), which is also when the experiment's status is re-read to notice a cancel.

A database that is unreachable is waited for (``workers.runs.outage``): the reports stay
buffered and training goes on between attempts, a checkpoint waits to be recorded, and once the
database answers again everything is written and the run's log says how long it was away.
Checkpoints are stored, recorded and pruned by ``workers.runs.checkpoints``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from core.db import retry_transient
from core.enums import EventKind, ExperimentStatus
from core.experiments.events import EventRepository
from core.experiments.repository import ExperimentRepository
from core.metrics.repository import MetricRepository, MetricWrite
from core.storage import ArtifactStore
from learners.api import MetricPoint
from workers.runs.checkpoints import CheckpointWriter
from workers.runs.outage import Patience

EVAL_RETURN = "eval/episode_return"
"""The metric a checkpoint is ranked by (``learners.runners.base.evaluate``: the greedy mean)."""

log = logging.getLogger(__name__)

_LOG_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


class StopCause(StrEnum):
    """Why the hooks told the run to stop."""

    CANCELLED = "cancelled"
    SHUTDOWN = "shutdown"
    TIME_LIMIT = "time_limit"
    LOST = "lost"
    EARLY_STOP = "early_stop"
    """A rung of the run's sweep stopped it (``workers.runs.early_stop``)."""


class DatabaseHooks:
    """Training hooks that persist to the database and the artifact storage."""

    def __init__(
        self,
        experiment_id: str,
        session_factory: sessionmaker[Session],
        storage: ArtifactStore,
        *,
        keep_last: int,
        keep_best: bool = True,
        total_steps: int,
        poll_interval_s: float,
        time_limit_s: float,
        shutdown_requested: Callable[[], bool] = lambda: False,
        worker_id: str | None = None,
        upload_retry_s: float = 0.0,
        max_run_bytes: int | None = None,
        max_project_bytes: int | None = None,
        database_outage_s: float = 0.0,
    ) -> None:
        """``worker_id``: the worker whose lease the run holds; every write is conditional on
        still holding it. None only where the hooks are driven by hand (tests, benchmarks).
        ``upload_retry_s``: how long a checkpoint upload the store refused is tried again (with
        backoff) before the run fails, so that a store restarting costs a run nothing.
        ``max_run_bytes``, ``max_project_bytes``: the bytes of checkpoints the run, and every run
        of its project together, may keep (``MARLFORGE_RUN_MAX_CHECKPOINT_MB``,
        ``MARLFORGE_PROJECT_MAX_ARTIFACT_MB``): a checkpoint past either is not recorded, its
        file is deleted, and the run fails with ``ArtifactQuotaExceeded``, its earlier
        checkpoints kept. None: no limit. ``database_outage_s``: how long an unreachable database
        is waited for (the worker passes most of the lease's length) before the run fails."""
        self.experiment_id = experiment_id
        self.stop_reason: str | None = None
        """Why the run was told to stop, where the cause alone does not say (``EARLY_STOP``)."""
        self._patience = Patience(experiment_id, database_outage_s)
        self._checkpoints = CheckpointWriter(
            experiment_id,
            session_factory,
            storage,
            keep_last=keep_last,
            keep_best=keep_best,
            upload_retry_s=upload_retry_s,
            max_run_bytes=max_run_bytes,
            max_project_bytes=max_project_bytes,
            report=self._report_now,
        )
        self.worker_id = worker_id
        self.session_factory = session_factory
        self._eval: tuple[int, float] | None = None
        """The step and value of the newest finite ``eval/episode_return``: the runner reports an
        evaluation before the checkpoint it takes at the same step, so that checkpoint's return."""
        self.total_steps = total_steps
        self.poll_interval_s = poll_interval_s
        self.deadline = time.monotonic() + time_limit_s
        self.shutdown_requested = shutdown_requested
        self.stop_cause: StopCause | None = None
        self.step = 0
        self._written_step = -1
        self._metrics: list[MetricWrite] = []
        self._logs: list[dict[str, Any]] = []
        self._next_flush = 0.0

    # --- TrainingHooks ---------------------------------------------------------------------

    def metrics(self, points: Sequence[MetricPoint]) -> None:
        for p in points:
            value = float(p.value)
            if p.name == EVAL_RETURN and math.isfinite(value):
                self._eval = (int(p.step), value)
            self._metrics.append(
                MetricWrite(
                    int(p.step), p.name, value if math.isfinite(value) else None, float(p.wall_time)
                )
            )
        self._maybe_flush()

    def progress(self, step: int) -> None:
        self.step = int(step)
        self._maybe_flush()

    def checkpoint(self, step: int, write: Callable[[Path], None]) -> None:
        self.step = max(self.step, int(step))
        self.flush()
        if self.stop_cause == StopCause.LOST:
            return  # the run is another worker's now: its checkpoints are its own
        stored = self._checkpoints.store(int(step), write)
        eval_return = self._eval[1] if self._eval and self._eval[0] == int(step) else None
        pruned, refusal = self._patiently(
            lambda: self._checkpoints.record(int(step), stored, eval_return),
            "recording a checkpoint",
        )
        self._checkpoints.settle(stored, pruned, refusal)

    def should_stop(self) -> bool:
        if self.stop_cause is None and self.shutdown_requested():
            self.stop_cause = StopCause.SHUTDOWN
        if self.stop_cause is None and time.monotonic() > self.deadline:
            self.stop_cause = StopCause.TIME_LIMIT
        self._maybe_flush()
        return self.stop_cause is not None

    def log(self, level: str, message: str) -> None:
        log.log(_LOG_LEVELS.get(level, logging.INFO), "[%s] %s", self.experiment_id, message)
        self._logs.append({"level": level, "message": message, "step": self.step})
        self._maybe_flush()

    # --- writing -----------------------------------------------------------------------------

    def _maybe_flush(self) -> None:
        if time.monotonic() >= self._next_flush:
            self.flush()

    def flush(self) -> None:
        """Write everything buffered in one transaction and re-read the status. A connection
        lost in the middle is retried on a new one (``core.db.retry_transient``); if the database
        stays away, the batch is kept for the next flush, and training goes on while the outage
        is shorter than ``database_outage_s`` (then ``DatabaseOutage``)."""
        self._next_flush = time.monotonic() + self.poll_interval_s
        metrics, self._metrics = self._metrics, []
        logs, self._logs = self._logs, []
        try:
            status = retry_transient(
                lambda: self._write(metrics, logs), "writing the run's reports"
            )
        except Exception as exc:
            self._metrics, self._logs = metrics + self._metrics, logs + self._logs
            self._patience.failed(exc, self.step)
            return  # an outage it may wait out: the next flush tries again
        self._back(self._patience.back())
        if status is None:
            self._lost()
            return
        self._written_step = self.step
        self._notice(status)

    def flush_final(self) -> None:
        """``flush``, waiting for an unreachable database (up to ``database_outage_s``, then
        ``DatabaseOutage``): a run's last reports are written before it records its end."""
        while True:
            self.flush()
            if self._patience.since is None:
                return
            time.sleep(min(1.0, self.poll_interval_s))

    def _back(self, said: str | None) -> None:
        """After a write that reached the database: say in the run's log how long it was away."""
        if said is not None:
            self.log("warning", said)

    def _patiently(self, operation: Callable[[], Any], what: str) -> Any:
        """``operation`` (a transaction) retried while the database is unreachable, for up to
        ``database_outage_s`` in all; then ``DatabaseOutage``."""
        result, said = self._patience.run(operation, what, self.step)
        self._back(said)
        return result

    def _report_now(self, level: str, message: str) -> None:
        self.log(level, message)
        self.flush()

    def _write(
        self, metrics: list[MetricWrite], logs: list[dict[str, Any]]
    ) -> ExperimentStatus | None:
        """One flush's transaction; the status it read, or None when the run is not this one's."""
        with self.session_factory() as session:
            events = EventRepository(session)
            experiments = ExperimentRepository(session)
            # Read first, the row locked until the commit: a run taken over by another worker
            # (or ended) gets nothing more from this one, so no step is ever written twice.
            status, holder = experiments.holder(self.experiment_id)
            if not self._holds(status, holder):
                session.rollback()
                return None
            latest = self._write_metrics(session, metrics)
            experiments.set_progress(self.experiment_id, self.step, latest)
            if self.step != self._written_step:
                events.add(
                    self.experiment_id,
                    EventKind.PROGRESS,
                    {"step": self.step, "total_steps": self.total_steps},
                )
            for entry in logs:
                events.add(self.experiment_id, EventKind.LOG, entry)
            session.commit()
        return status

    def _write_metrics(self, session: Session, metrics: list[MetricWrite]) -> dict[str, Any] | None:
        if not metrics:
            return None
        MetricRepository(session).write(self.experiment_id, metrics)
        experiment = ExperimentRepository(session).get(self.experiment_id)
        latest = dict(experiment.latest_metrics) if experiment is not None else {}
        for point in sorted(metrics, key=lambda p: p.step):
            if point.name not in latest or latest[point.name]["step"] <= point.step:
                latest[point.name] = {"step": point.step, "value": point.value}
        EventRepository(session).add(
            self.experiment_id,
            EventKind.METRICS,
            {
                "points": [
                    {"step": p.step, "name": p.name, "value": p.value, "wall_time": p.wall_time}
                    for p in metrics
                ]
            },
        )
        return latest

    def _holds(self, status: ExperimentStatus | None, holder: str | None) -> bool:
        if self.worker_id is None:
            return status is not None  # driven by hand (a test, a benchmark): no lease to hold
        held = status in (ExperimentStatus.RUNNING, ExperimentStatus.CANCELLING)
        return held and holder == self.worker_id

    def _lost(self) -> None:
        # Deleted, moved on by someone else, or taken over by another worker: this run no
        # longer owns the experiment, and what it had not written yet is dropped.
        log.warning("[%s] this run no longer holds the experiment; stopping", self.experiment_id)
        self.stop_cause = StopCause.LOST
        self._metrics, self._logs = [], []

    def _notice(self, status: ExperimentStatus | None) -> None:
        if self.stop_cause is not None:
            return
        if status == ExperimentStatus.CANCELLING:
            self.stop_cause = StopCause.CANCELLED
        elif status != ExperimentStatus.RUNNING:
            self.stop_cause = StopCause.LOST  # moved on by someone else
