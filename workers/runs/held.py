"""The run a worker holds: every write that records on it, ends it or returns it to the queue
while the worker holds its lease, each conditional on still holding it.

A worker that lost the run (its lease lapsed and another worker took it over, or someone moved it
on) can never write over whoever has it now. The run's reports while it trains (metrics, progress,
log lines, checkpoints) go through ``workers.runs.hooks.DatabaseHooks``, which checks the same hold.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import ColumnElement
from sqlalchemy.orm import Session, sessionmaker

from core.db import retry_transient, utcnow
from core.enums import EventKind, ExperimentStatus
from core.experiments.events import EventRepository
from core.experiments.repository import ExperimentRepository
from core.leases import service as leases
from core.lifecycle import transition
from core.models import Experiment
from learners.api import ExperimentSpec
from workers.outcome import Outcome, RunLimits
from workers.runs.hooks import DatabaseHooks, StopCause
from workers.supervisor import Ending, Supervised

log = logging.getLogger(__name__)

S = ExperimentStatus
_HELD = (S.RUNNING, S.CANCELLING)
"""The statuses of a run a worker holds."""


@dataclass(frozen=True)
class HeldRun:
    """A run this worker holds, by its lease (``worker_id``). Each write is retried on a lost
    connection and does nothing once the run is no longer this worker's."""

    experiment_id: str
    session_factory: sessionmaker[Session]
    worker_id: str

    def condition(self) -> ColumnElement[bool]:
        """The further condition of every write: the run is still this worker's."""
        return Experiment.worker_id == self.worker_id

    def step(self) -> int:
        """The step the run shows (0 when it no longer exists)."""
        with self.session_factory() as session:
            experiment = ExperimentRepository(session).get(self.experiment_id)
            return experiment.step if experiment is not None else 0

    def record_device(self, spec: ExperimentSpec) -> None:
        """Record on the run the device it computes on here, as ``train`` resolves it in this
        process (a ``cuda`` run on a worker without a GPU raises ``DeviceUnavailable``, which
        fails it)."""
        from learners.api import describe_device, resolve_device

        device = describe_device(spec.backend, resolve_device(spec.backend, spec.device))

        def record() -> None:
            with self.session_factory() as session:
                ExperimentRepository(session).set_device(self.experiment_id, self.worker_id, device)
                session.commit()

        retry_transient(record, "recording the run's device")
        log.info("experiment %s runs on %s", self.experiment_id, device)

    # --- the three ways a held run is let go ---------------------------------------------------

    def end(self, to: ExperimentStatus, reason: str | None) -> bool:
        """Record the run's end (``running``/``cancelling`` -> ``to``), as the run's own process
        does; False when it was not this worker's to end."""
        return self._move(_HELD, to, reason)

    def end_logged(self, to: ExperimentStatus, reason: str, step: int) -> None:
        """``end`` for a run whose process was stopped (killed, or died) and so could not record
        its end itself: the worker also writes the reason to the run's log, at ``step``, where the
        process would have written it, and to its own log."""
        self._move(_HELD, to, reason, log_at=step)
        log.warning("experiment %s: %s", self.experiment_id, reason)

    def requeue_or_cancel(self, reason: str, step: int) -> Outcome:
        """Return the run to the queue, as the worker shuts down, for another worker to continue
        from its last checkpoint (``REQUEUE``). Only a ``running`` run goes back: one whose cancel
        arrived meanwhile ends ``cancelled`` instead (``DONE``)."""
        if self._move([S.RUNNING], S.QUEUED, reason):
            return Outcome.REQUEUE
        self.end(S.CANCELLED, f"cancelled at step {step}")
        return Outcome.DONE

    # --- how a run ended, from either side of the process boundary ----------------------------

    def end_after_training(self, hooks: DatabaseHooks, limits: RunLimits) -> Outcome:
        """In the run's process, once ``train`` returned: record the end that ``hooks`` say it
        stopped for (none: the budget is spent, and the run succeeded)."""
        cause, step = hooks.stop_cause, hooks.step
        at = f"at step {step}"
        if cause == StopCause.LOST:
            log.warning("experiment %s was taken over by another worker %s", self.experiment_id, at)
            return Outcome.DONE
        if cause == StopCause.SHUTDOWN:
            reason = f"the worker shut down {at}; the run continues from its checkpoint"
            return self.requeue_or_cancel(reason, step)
        if cause == StopCause.TIME_LIMIT:
            limit = f"the run exceeded the time limit of {limits.time_limit_s:.0f} s"
            self.end(S.FAILED, f"stopped {at}: {limit}")
        elif cause == StopCause.CANCELLED:
            self.end(S.CANCELLED, f"cancelled {at}")
        elif cause == StopCause.EARLY_STOP:
            self.end(S.SUCCEEDED, hooks.stop_reason)
        else:
            # Training returned without being asked to stop: the budget is spent. A cancel that
            # arrived after the last status read is moot.
            self.end(S.SUCCEEDED, None)
        return Outcome.DONE

    def end_after_process(
        self, result: Supervised[Outcome], limits: RunLimits, shutting_down: bool
    ) -> Outcome:
        """In the worker, for a run whose process could not record its end: the worker killed it
        (over its memory budget, deaf to a cancel or a shutdown), or it died."""
        step = self.step()
        if result.ending == Ending.IGNORED_SHUTDOWN or shutting_down:
            # The worker is going away: the run continues on another one from its last checkpoint.
            how = f"ended with {result.detail}"
            if result.ending == Ending.IGNORED_SHUTDOWN:
                how = f"did not stop within {limits.cancel_grace_s:g} s"
            reason = (
                f"the worker shut down at step {step} (the run {how}); "
                "the run continues from its last checkpoint"
            )
            return self.requeue_or_cancel(reason, step)
        to, reason = _stop_reason(result, step, limits)
        self.end_logged(to, reason, step)
        return Outcome.DONE

    # --- the one write behind them all -------------------------------------------------------

    def _move(
        self,
        expected: Iterable[ExperimentStatus],
        to: ExperimentStatus,
        reason: str | None,
        log_at: int | None = None,
    ) -> bool:
        """Move the run from ``expected`` to ``to`` and end the lease, if it is still this
        worker's; with ``log_at``, the reason goes to the run's log as well. Whether it moved."""
        return retry_transient(
            lambda: self._move_once(list(expected), to, reason, log_at),
            f"recording that the run is {to}",
        )

    def _move_once(
        self,
        expected: list[ExperimentStatus],
        to: ExperimentStatus,
        reason: str | None,
        log_at: int | None,
    ) -> bool:
        now = utcnow()
        # A run handed back to its queue goes ahead of new work there
        # (``core.dispatch.fair_share``).
        finished_at, interrupted_at = (None, now) if to == S.QUEUED else (now, None)
        with self.session_factory() as session:
            moved = transition(
                session, self.experiment_id, expected, to, reason,
                condition=self.condition(), finished_at=finished_at,
                interrupted_at=interrupted_at, **leases.RELEASED,
            )  # fmt: skip
            if moved is not None and log_at is not None:
                level = "error" if to == S.FAILED else "warning"
                entry = {"level": level, "message": reason, "step": log_at}
                EventRepository(session).add(self.experiment_id, EventKind.LOG, entry)
            session.commit()
        return moved is not None


def _stop_reason(
    result: Supervised[Outcome], step: int, limits: RunLimits
) -> tuple[ExperimentStatus, str]:
    """How a run that the worker stopped, or whose process died, ends, and why (for a person)."""
    if result.ending == Ending.OVER_MEMORY:
        return S.FAILED, (
            f"stopped at step {step}: the run used {result.memory_mb:,.0f} MiB, above its memory "
            f"budget of {limits.memory_mb:,} MiB (MARLFORGE_RUN_MEMORY_MB)"
        )
    if result.ending == Ending.IGNORED_CANCEL:
        return S.CANCELLED, (
            f"did not stop within {limits.cancel_grace_s:g} s of the cancel request; "
            f"stopped by the worker at step {step}"
        )
    if result.ending == Ending.DIED:
        return S.FAILED, (
            f"the run's process died at step {step} ({result.detail}) before it recorded an end"
        )
    return S.FAILED, f"the run's process failed at step {step}: {result.detail}"
