"""One training run from start to end, as plain Python: the Celery task only calls this.

``run_experiment`` claims the experiment (``queued -> running``) and trains it in a child process
(``workers.supervisor``) that finds the checkpoint to resume from, runs ``learners.training.train``
with database-backed hooks, and records how it ended: ``succeeded``, ``failed`` with the error's
message, ``cancelled``, or back to ``queued`` when the worker itself is shutting down (the caller
then returns the job to the broker). When the worker kills the child (over its memory budget, deaf
to a cancel or a shutdown past the grace) or the child dies, the worker records the end instead.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from pydantic import ValidationError
from sqlalchemy import ColumnElement, Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from core import leases
from core.db import make_engine, make_session_factory, retry_transient, utcnow
from core.enums import EventKind, ExperimentStatus
from core.lifecycle import transition
from core.models import Checkpoint, Experiment
from core.repositories import (
    CheckpointRepository,
    EventRepository,
    ExperimentRepository,
    MetricRepository,
)
from core.settings import get_settings
from core.storage import (
    ArtifactStore,
    ObjectCorrupt,
    ObjectMissing,
    StoreError,
    checkpoint_prefix,
    verified_copy,
)
from core.streaming import publish_after_commit, publisher_for
from learners.spec import ExperimentSpec
from workers.hooks import DatabaseHooks, StopCause
from workers.supervisor import Ending, Guards, Supervised, supervise
from workers.threads import limit_threads

log = logging.getLogger(__name__)

S = ExperimentStatus


class Outcome(StrEnum):
    """What the task should tell the broker after ``run_experiment``."""

    DONE = "done"
    """The message is finished with (whatever the run's status): acknowledge it."""
    REQUEUE = "requeue"
    """The worker is shutting down mid-run: return the message so another run resumes it."""


@dataclass(frozen=True)
class RunLimits:
    """How the worker bounds a run."""

    poll_interval_s: float
    time_limit_s: float
    lease_ttl_s: float = 60.0
    """How long the worker's hold on a run lasts without a renewal (``MARLFORGE_LEASE_TTL_S``);
    renewed every poll interval (``core.leases``)."""
    memory_mb: int = 4096
    """Resident memory the run's processes may hold, in MiB (``MARLFORGE_RUN_MEMORY_MB``)."""
    cancel_grace_s: float = 60.0
    """How long a run has to honour a cancel or the worker's shutdown before the worker kills it
    (``MARLFORGE_CANCEL_GRACE_S``)."""
    store_outage_s: float = 0.0
    """How long a checkpoint upload is tried again while the artifact store refuses it before
    the run fails (``MARLFORGE_STORE_OUTAGE_S``)."""


@dataclass(frozen=True)
class RunJob:
    """What the run's process is given (pickled): it opens its own database connections."""

    experiment_id: str
    spec: ExperimentSpec
    database_url: str
    storage: ArtifactStore
    limits: RunLimits
    worker_id: str


def run_experiment(
    experiment_id: str,
    session_factory: sessionmaker[Session],
    storage: ArtifactStore,
    limits: RunLimits,
    shutdown_requested: Callable[[], bool] = lambda: False,
    worker_id: str | None = None,
) -> Outcome:
    """Run the experiment's training to its end, in a child process, and record the result.
    ``worker_id`` names this worker in the run's lease (``core.leases.default_worker_id()``)."""
    worker_id = worker_id or leases.default_worker_id()
    spec = _claim(experiment_id, session_factory, limits, worker_id)
    if spec is None:
        return Outcome.DONE
    job = RunJob(experiment_id, spec, _database_url(session_factory), storage, limits, worker_id)
    lease = _Lease(session_factory, experiment_id, worker_id, limits.lease_ttl_s)
    result = supervise(
        train_claimed,
        job,
        Guards(limits.poll_interval_s, limits.memory_mb, limits.cancel_grace_s),
        cancel_requested=lambda: _cancel_requested(session_factory, experiment_id),
        shutdown_requested=shutdown_requested,
        still_held=lease.renew,
        name=f"run-{experiment_id}",
    )
    if result.ending == Ending.RETURNED and result.value is not None:
        return result.value
    if result.ending == Ending.LOST:
        # Another worker has the run now (our lease lapsed), or the run was moved on and its
        # process did not stop: leave everything to whoever has it, partial checkpoint files
        # included, and let the broker forget this message.
        log.warning("experiment %s is no longer this worker's; stopped it here", experiment_id)
        return Outcome.DONE
    run = _Held(experiment_id, session_factory, worker_id)
    return _record_stop(run, storage, limits, result, shutdown_requested())


def train_claimed(job: RunJob, shutdown_requested: Callable[[], bool]) -> Outcome:
    """In the run's own process: resume, train with database hooks, record how the run ended."""
    settings = get_settings()
    # The worker's caps, set before a framework is imported (a no-op under ``marlforge worker``,
    # whose environment this process inherits already capped).
    limit_threads(settings.worker_threads)
    engine = make_engine(job.database_url)
    session_factory = make_session_factory(engine)
    publish_after_commit(session_factory, publisher_for(settings))
    try:
        return _train(job, session_factory, job.storage, shutdown_requested)
    finally:
        engine.dispose()


def _train(
    job: RunJob,
    session_factory: sessionmaker[Session],
    storage: ArtifactStore,
    shutdown_requested: Callable[[], bool],
) -> Outcome:
    experiment_id, spec, limits = job.experiment_id, job.spec, job.limits
    run = _Held(experiment_id, session_factory, job.worker_id)
    hooks = DatabaseHooks(
        experiment_id,
        session_factory,
        storage,
        keep_last=spec.checkpoint.keep_last,
        keep_best=spec.checkpoint.keep_best,
        total_steps=spec.total_steps,
        poll_interval_s=limits.poll_interval_s,
        time_limit_s=limits.time_limit_s,
        shutdown_requested=shutdown_requested,
        worker_id=job.worker_id,
        upload_retry_s=limits.store_outage_s,
    )
    # A run that fails before it trains (its checkpoint is missing) keeps the step it shows.
    hooks.step = retry_transient(
        lambda: _step_of(session_factory, experiment_id), "reading the run's step"
    )
    copy = _resume_copy(storage, experiment_id)
    try:
        from learners.training import train

        _record_device(run, spec)
        resume_from = _prepare_resume(experiment_id, session_factory, storage, hooks, copy)
        # The copy goes once the run has loaded it: a checkpoint holds a replay buffer's worth.
        train(spec, hooks, resume_from=resume_from, on_resumed=lambda: copy.unlink(missing_ok=True))
        hooks.flush()
    except Exception as exc:
        log.exception("experiment %s failed", experiment_id)
        hooks.log("error", f"the run failed: {_describe(exc)}")
        _flush_quietly(hooks)
        _finish(run, S.FAILED, _describe(exc))
        return Outcome.DONE
    finally:
        copy.unlink(missing_ok=True)
    return _record_end(run, hooks, limits)


def _record_device(run: _Held, spec: ExperimentSpec) -> None:
    """Record on the run the device it computes on here, as ``train`` resolves it in this process
    (a ``cuda`` run on a worker without a GPU raises ``DeviceUnavailable``, which fails it)."""
    from learners.backends import describe_device, resolve_device

    device = describe_device(spec.backend, resolve_device(spec.backend, spec.device))

    def record() -> None:
        with run.session_factory() as session:
            ExperimentRepository(session).set_device(run.experiment_id, run.worker_id, device)
            session.commit()

    retry_transient(record, "recording the run's device")
    log.info("experiment %s runs on %s", run.experiment_id, device)


def _claim(
    experiment_id: str, session_factory: sessionmaker[Session], limits: RunLimits, worker_id: str
) -> ExperimentSpec | None:
    """Move the experiment to ``running`` under this worker's lease and return its spec; None
    when there is nothing to run (it is not queued: a redelivered message of a run another worker
    holds, or one that ended)."""
    with session_factory() as session:
        experiment = ExperimentRepository(session).get(experiment_id)
        if experiment is None:
            log.warning("experiment %s does not exist; dropping its job", experiment_id)
            return None
        if experiment.status != S.QUEUED:
            log.info("experiment %s is %s; not starting it", experiment_id, experiment.status)
            return None
        try:
            spec = ExperimentSpec.model_validate(experiment.spec)
        except ValidationError as exc:
            _end_now(session, experiment, S.FAILED, f"the stored spec is no longer valid: {exc}")
            return None
        moved = transition(
            session, experiment_id, [S.QUEUED], S.RUNNING, f"started on worker {worker_id}",
            attempts=experiment.attempts + 1, started_at=experiment.started_at or utcnow(),
            **leases.hold(worker_id, limits.lease_ttl_s),
        )  # fmt: skip
        session.commit()
        return spec if moved is not None else None


def _end_now(session: Session, experiment: Experiment, to: ExperimentStatus, reason: str) -> None:
    transition(
        session, experiment.id, [experiment.status], to, reason,
        finished_at=utcnow(), **leases.RELEASED,
    )  # fmt: skip
    session.commit()


class _Lease:
    """The worker's side of a run's lease: ``renew`` is called every poll while the run's process
    lives and answers whether the process may go on."""

    def __init__(
        self, session_factory: sessionmaker[Session], experiment_id: str, worker_id: str,
        ttl_s: float,
    ) -> None:  # fmt: skip
        self.session_factory = session_factory
        self.experiment_id = experiment_id
        self.worker_id = worker_id
        self.ttl_s = ttl_s
        self.renewed = time.monotonic()
        self.released: float | None = None

    def renew(self) -> bool:
        try:
            hold = leases.renew(
                self.session_factory, self.experiment_id, self.worker_id, self.ttl_s
            )
        except SQLAlchemyError as exc:
            # Unreachable database: keep training while the lease may still be ours. Past its
            # length, another worker may have the run; stop, and never write beside it.
            silent = time.monotonic() - self.renewed
            log.warning(
                "could not renew the lease on %s (%.0f s since the last renewal): %s",
                self.experiment_id, silent, exc,
            )  # fmt: skip
            return silent < self.ttl_s
        if hold == leases.Hold.HELD:
            self.renewed = time.monotonic()
            return True
        if hold == leases.Hold.TAKEN:
            return False
        # Released: most often the run's own process has just recorded its end (a shutdown's
        # return to the queue too) and is about to report it; stopping it now would lose that
        # report. Whoever released it, the process can no longer write, so it stops by itself:
        # give it the lease's length to do so.
        now = time.monotonic()
        if self.released is None:
            self.released = now
        if now - self.released < self.ttl_s:
            return True
        log.warning(
            "experiment %s was moved on %.0f s ago and its process has not stopped; stopping it",
            self.experiment_id, now - self.released,
        )  # fmt: skip
        return False


def _resume_copy(storage: ArtifactStore, experiment_id: str) -> Path:
    """This host's copy of the checkpoint a run resumes from (one per run)."""
    return storage.cache_dir / "resume" / f"{experiment_id}.ckpt"


def _prepare_resume(
    experiment_id: str,
    session_factory: sessionmaker[Session],
    storage: ArtifactStore,
    hooks: DatabaseHooks,
    copy: Path,
) -> Path | None:
    """The local copy of the checkpoint to continue from, downloaded from the store and checked
    against its record; then the metrics and checkpoints after it are forgotten (they will be
    computed again on the same step axis). A checkpoint that is missing, corrupt or unreadable
    fails the run before anything is forgotten: a fault never erases what a run has recorded."""
    storage.remove_partials(checkpoint_prefix(experiment_id))
    latest = retry_transient(
        lambda: _latest_checkpoint(experiment_id, session_factory),
        "finding the checkpoint to resume from",
    )
    if latest is not None:
        _fetch(storage, latest, copy)
        hooks.log(
            "info",
            f"fetched the checkpoint at step {latest.step:,} from {storage.locate(latest.path)} "
            f"({latest.size_bytes:,} bytes, sha256 verified)",
        )
    stale = retry_transient(
        lambda: _forget_after(experiment_id, session_factory, latest),
        "forgetting what follows the checkpoint",
    )
    for row in stale:
        try:
            storage.delete(row.path)
        except StoreError as exc:
            log.warning("experiment %s: %s", experiment_id, exc)  # an orphan, not a fault
    return copy if latest is not None else None


def _fetch(storage: ArtifactStore, latest: Checkpoint, copy: Path) -> None:
    at = f"the checkpoint at step {latest.step:,} ({latest.path})"
    kept = "so the run cannot continue from it; its records are kept"
    try:
        verified_copy(storage, latest.path, latest.sha256, copy)
    except ObjectMissing:
        raise MissingCheckpoint(f"{at} is missing from the artifact storage, {kept}") from None
    except ObjectCorrupt as exc:
        raise MissingCheckpoint(
            f"{at} is corrupt in the artifact storage (its sha256 is {exc.actual}, its record "
            f"says {exc.expected}), {kept}"
        ) from None
    except StoreError as exc:
        raise MissingCheckpoint(f"{at} could not be read: {exc}; {kept}") from None


def _latest_checkpoint(
    experiment_id: str, session_factory: sessionmaker[Session]
) -> Checkpoint | None:
    with session_factory() as session:
        return CheckpointRepository(session).latest(experiment_id)


def _forget_after(
    experiment_id: str, session_factory: sessionmaker[Session], latest: Checkpoint | None
) -> list[Checkpoint]:
    """Delete the checkpoint records and metrics after ``latest`` (everything without one: the
    run starts over); the deleted checkpoint records, whose objects go next."""
    with session_factory() as session:
        checkpoints = CheckpointRepository(session)
        step = latest.step if latest is not None else 0
        stale = checkpoints.after(experiment_id, step)
        checkpoints.delete(stale)
        MetricRepository(session).delete_after(experiment_id, step if latest is not None else -1)
        ExperimentRepository(session).set_progress(
            experiment_id, step, None if latest is not None else {}
        )
        session.commit()
    return stale


class MissingCheckpoint(RuntimeError):
    """The checkpoint a run must continue from is missing, corrupt or unreadable in the store."""


def _record_end(run: _Held, hooks: DatabaseHooks, limits: RunLimits) -> Outcome:
    experiment_id = run.experiment_id
    cause = hooks.stop_cause
    at = f"at step {hooks.step}"
    if cause == StopCause.LOST:
        log.warning("experiment %s was taken over by another worker %s", experiment_id, at)
        return Outcome.DONE
    if cause == StopCause.SHUTDOWN:
        requeued = _finish(
            run,
            S.QUEUED,
            f"the worker shut down {at}; the run continues from its checkpoint",
            only_from=[S.RUNNING],
        )
        if requeued:
            return Outcome.REQUEUE
        _finish(run, S.CANCELLED, f"cancelled {at}")
        return Outcome.DONE
    if cause == StopCause.TIME_LIMIT:
        _finish(
            run,
            S.FAILED,
            f"stopped {at}: the run exceeded the time limit of {limits.time_limit_s:.0f} s",
        )
    elif cause == StopCause.CANCELLED:
        _finish(run, S.CANCELLED, f"cancelled {at}")
    else:
        # Training returned without being asked to stop: the budget is spent. A cancel that
        # arrived after the last status read is moot.
        _finish(run, S.SUCCEEDED, None)
    return Outcome.DONE


def _record_stop(
    run: _Held,
    storage: ArtifactStore,
    limits: RunLimits,
    result: Supervised[Outcome],
    shutting_down: bool,
) -> Outcome:
    """Record the end of a run whose process could not: the worker killed it, or it died."""
    # A checkpoint the process was writing when it died is a temporary file (or an unfinished
    # upload), never recorded; the copy it resumed from is this host's.
    _resume_copy(storage, run.experiment_id).unlink(missing_ok=True)
    try:
        storage.remove_partials(checkpoint_prefix(run.experiment_id))
    except StoreError as exc:
        log.warning("experiment %s: %s", run.experiment_id, exc)
    step = _step_of(run.session_factory, run.experiment_id)
    if result.ending == Ending.IGNORED_SHUTDOWN or shutting_down:
        # The worker is going away: the run continues on another one from its last checkpoint.
        how = f"ended with {result.detail}"
        if result.ending == Ending.IGNORED_SHUTDOWN:
            how = f"did not stop within {limits.cancel_grace_s:g} s"
        reason = (
            f"the worker shut down at step {step} (the run {how}); "
            "the run continues from its last checkpoint"
        )
        if _finish(run, S.QUEUED, reason, only_from=[S.RUNNING]):
            return Outcome.REQUEUE
        _finish(run, S.CANCELLED, f"cancelled at step {step}")
        return Outcome.DONE
    to, reason = _stop_reason(result, step, limits)
    _end_in_log(run, to, reason, step)
    return Outcome.DONE


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


def _cancel_requested(session_factory: sessionmaker[Session], experiment_id: str) -> bool:
    try:
        with session_factory() as session:
            return ExperimentRepository(session).status_of(experiment_id) == S.CANCELLING
    except SQLAlchemyError as exc:
        # The run goes on; it reads its status itself and the next poll asks again.
        log.warning("could not read the status of experiment %s: %s", experiment_id, exc)
        return False


def _step_of(session_factory: sessionmaker[Session], experiment_id: str) -> int:
    with session_factory() as session:
        experiment = ExperimentRepository(session).get(experiment_id)
        return experiment.step if experiment is not None else 0


def _database_url(session_factory: sessionmaker[Session]) -> str:
    """The URL the run's process opens its own engine on (a process never shares connections)."""
    bind = session_factory.kw.get("bind")
    if not isinstance(bind, Engine):
        raise TypeError("a run's process opens its own connections: bind the sessions to an engine")
    return bind.url.render_as_string(hide_password=False)


@dataclass(frozen=True)
class _Held:
    """A run this worker holds: every end it records is conditional on still holding it, so a
    worker that lost the run (its lease lapsed and another took over) can never end it."""

    experiment_id: str
    session_factory: sessionmaker[Session]
    worker_id: str

    def condition(self) -> ColumnElement[bool]:
        return Experiment.worker_id == self.worker_id


def _finish(
    run: _Held,
    to: ExperimentStatus,
    reason: str | None,
    only_from: list[ExperimentStatus] | None = None,
) -> bool:
    """Record the run's end (or its return to the queue); False when it was not this worker's
    to end. A lost connection is retried."""
    return retry_transient(
        lambda: _finish_once(run, to, reason, only_from), f"recording that the run is {to}"
    )


def _finish_once(
    run: _Held,
    to: ExperimentStatus,
    reason: str | None,
    only_from: list[ExperimentStatus] | None,
) -> bool:
    finished_at = None if to == S.QUEUED else utcnow()
    with run.session_factory() as session:
        moved = transition(
            session,
            run.experiment_id,
            only_from or [S.RUNNING, S.CANCELLING],
            to,
            reason,
            condition=run.condition(),
            finished_at=finished_at,
            **leases.RELEASED,
        )
        session.commit()
    return moved is not None


def _end_in_log(run: _Held, to: ExperimentStatus, reason: str, step: int) -> None:
    """``_finish`` for a run whose process was stopped: the reason goes to the run's log too,
    where the run itself would have written it."""
    retry_transient(
        lambda: _end_in_log_once(run, to, reason, step), f"recording that the run is {to}"
    )
    log.warning("experiment %s: %s", run.experiment_id, reason)


def _end_in_log_once(run: _Held, to: ExperimentStatus, reason: str, step: int) -> None:
    with run.session_factory() as session:
        moved = transition(
            session, run.experiment_id, [S.RUNNING, S.CANCELLING], to, reason,
            condition=run.condition(), finished_at=utcnow(), **leases.RELEASED,
        )  # fmt: skip
        if moved is not None:
            level = "error" if to == S.FAILED else "warning"
            entry = {"level": level, "message": reason, "step": step}
            EventRepository(session).add(run.experiment_id, EventKind.LOG, entry)
        session.commit()


def _flush_quietly(hooks: DatabaseHooks) -> None:
    # Keep the metrics the run reported before it failed; a failing database must not hide the
    # original error.
    try:
        hooks.flush()
    except Exception:
        log.exception("could not write the last reports of experiment %s", hooks.experiment_id)


def _describe(exc: BaseException) -> str:
    message = str(exc).strip()
    return message if message else type(exc).__name__
