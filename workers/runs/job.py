"""One training run from start to end, as plain Python: the Celery task only calls this.

``run_experiment`` claims the experiment (``queued -> running``, under this worker's lease) and
trains it in a child process (``workers.supervisor``) while the worker renews the lease
(``workers.runs.lease``). The child (``train_claimed``) finds the checkpoint to resume from
(``workers.runs.resume``) or, at a warm-started run's first start, the checkpoint it begins
from (``workers.runs.warm_start``), runs ``learners.training.train`` with database-backed hooks,
and records how it ended (``workers.runs.held``): ``succeeded``, ``failed`` with the error's
message, ``cancelled``, or back to ``queued`` when the worker itself is shutting down (the caller
then returns the job to the broker). When the worker kills the child (over its memory budget,
deaf to a cancel or a shutdown past the grace) or the child dies, the worker records the end
instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from core.db import make_engine, make_session_factory, retry_transient, utcnow
from core.dispatch import fair_share
from core.dispatch.queue import requested_suite
from core.enums import ExperimentStatus
from core.experiments.repository import ExperimentRepository
from core.leases import service as leases
from core.lifecycle import transition
from core.models import Experiment
from core.settings import get_settings
from core.storage import ArtifactStore
from core.streaming import publish_after_commit, publisher_for
from learners.api import ExperimentSpec
from workers.outcome import Outcome, RunLimits
from workers.presence import served_suites
from workers.runs.early_stop import EarlyStoppingHooks, rungs_of
from workers.runs.held import HeldRun
from workers.runs.hooks import DatabaseHooks
from workers.runs.lease import Lease
from workers.runs.resume import discard_leftovers, prepare_resume, resume_copy
from workers.runs.warm_start import init_copy, prepare_init
from workers.supervisor import Ending, supervise
from workers.threads import limit_threads

log = logging.getLogger(__name__)

S = ExperimentStatus

DATABASE_PATIENCE = 0.75
"""The part of the lease's length a run waits out an unreachable database for."""


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
    on_swapped: Callable[[str], None] | None = None,
) -> Outcome:
    """Run the experiment's training to its end, in a child process, and record the result.
    ``worker_id`` names this worker in the run's lease
    (``core.leases.service.default_worker_id()``).

    With ``on_swapped`` (a broker's message: ``workers.tasks``) the experiment's message is a
    claim on its queue: the worker runs the queue's first run in the fair order
    (``core.dispatch.fair_share``) and, when that is another run, calls
    ``on_swapped(experiment_id)`` so the experiment, still queued, has a message again. Without it,
    the experiment's own run."""
    worker_id = worker_id or leases.default_worker_id()
    claimed = _claim(experiment_id, session_factory, limits, worker_id, on_swapped is not None)
    if isinstance(claimed, Outcome):
        return claimed
    if claimed is None:
        return Outcome.DONE
    if on_swapped is not None and claimed[0] != experiment_id:
        log.info(
            "message of experiment %s: started experiment %s instead, first in its queue's fair "
            "order (core.dispatch.fair_share); sending experiment %s's message again",
            experiment_id,
            claimed[0],
            experiment_id,
        )
        on_swapped(experiment_id)
    experiment_id, spec = claimed
    job = RunJob(experiment_id, spec, _database_url(session_factory), storage, limits, worker_id)
    lease = Lease(session_factory, experiment_id, worker_id, limits.lease_ttl_s)
    result = supervise(
        train_claimed,
        job,
        limits.guards(),
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
    shutting_down = shutdown_requested()
    discard_leftovers(storage, experiment_id)
    run = HeldRun(experiment_id, session_factory, worker_id)
    return run.end_after_process(result, limits, shutting_down)


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
    experiment_id, spec = job.experiment_id, job.spec
    run = HeldRun(experiment_id, session_factory, job.worker_id)
    hooks = _hooks(job, session_factory, storage, shutdown_requested)
    # A run that fails before it trains (its checkpoint is missing) keeps the step it shows.
    hooks.step = retry_transient(run.step, "reading the run's step")
    copy = resume_copy(storage, experiment_id)
    parent_copy = init_copy(storage, experiment_id)
    try:
        from learners.api import train

        run.record_device(spec)
        resume_from = prepare_resume(experiment_id, session_factory, storage, hooks, copy)
        init_from = None
        if resume_from is None:
            init_from = prepare_init(spec, session_factory, storage, hooks, parent_copy)
            if init_from is not None and spec.init is not None and spec.init.what == "run":
                # A continuation resumes the other run's checkpoint, on its step axis.
                resume_from, init_from = init_from, None
        # A copy goes once the run has loaded it: a checkpoint holds a replay buffer's worth.
        train(
            spec,
            hooks,
            resume_from=resume_from,
            on_resumed=lambda: copy.unlink(missing_ok=True),
            init_from=init_from,
        )
        hooks.flush_final()
    except Exception as exc:
        log.exception("experiment %s failed", experiment_id)
        hooks.log("error", f"the run failed: {_describe(exc)}")
        _flush_quietly(hooks)
        run.end(S.FAILED, _describe(exc))
        return Outcome.DONE
    finally:
        copy.unlink(missing_ok=True)
        parent_copy.unlink(missing_ok=True)
    return run.end_after_training(hooks, job.limits)


def _hooks(
    job: RunJob,
    session_factory: sessionmaker[Session],
    storage: ArtifactStore,
    shutdown_requested: Callable[[], bool],
) -> DatabaseHooks:
    """The training hooks of the run's process: its reports to the database, under its lease
    (and a sweep run's rungs, ``workers.runs.early_stop``)."""
    spec, limits = job.spec, job.limits
    rungs = retry_transient(
        lambda: rungs_of(session_factory, job.experiment_id), "reading the run's sweep"
    )
    extra: dict[str, Any] = {} if rungs is None else {"rungs": rungs}
    hooks = DatabaseHooks if rungs is None else EarlyStoppingHooks
    return hooks(
        job.experiment_id,
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
        max_run_bytes=limits.checkpoint_bytes,
        max_project_bytes=limits.project_artifact_bytes,
        # Shorter than the lease, whose renewals fail alike: the run gives up before its worker
        # takes it for another's.
        database_outage_s=DATABASE_PATIENCE * limits.lease_ttl_s,
        **extra,
    )


def _claim(
    experiment_id: str,
    session_factory: sessionmaker[Session],
    limits: RunLimits,
    worker_id: str,
    fair: bool,
) -> tuple[str, ExperimentSpec] | Outcome | None:
    """Move a queued run to ``running`` under this worker's lease and return its id and spec:
    the experiment's own run, or with ``fair`` the first run of its queue in the fair order
    (``core.dispatch.fair_share``), which may be another. None when there is nothing to run (it is
    not queued: a redelivered message of a run another worker holds, or one that ended);
    ``Outcome.ELSEWHERE``, leaving it queued, when its environment suite is not one this worker
    serves."""
    with session_factory() as session:
        experiment = ExperimentRepository(session).get(experiment_id)
        if experiment is None:
            log.warning("experiment %s does not exist; dropping its job", experiment_id)
            return None
        if experiment.status != S.QUEUED:
            log.info("experiment %s is %s; not starting it", experiment_id, experiment.status)
            return None
        suite = requested_suite(experiment.spec)
        if suite not in served_suites():
            log.info(
                "experiment %s is for the %s suite, which this worker does not serve (it serves "
                "%s); leaving it queued",
                experiment_id,
                suite,
                ", ".join(served_suites()),
            )
            return Outcome.ELSEWHERE
        # The runs of one queue share a backend, a device class and a suite: any of them runs here.
        candidates: Iterable[str] = [experiment_id]
        if fair and experiment.queue is not None:
            candidates = fair_share.order(fair_share.load(session, experiment.queue))
        for candidate in candidates:
            spec = _take(session, candidate, limits, worker_id)
            if spec is not None:
                return candidate, spec
    return None


def _take(
    session: Session, experiment_id: str, limits: RunLimits, worker_id: str
) -> ExperimentSpec | None:
    """Claim the run if it is still queued (another worker may have taken it since the order was
    read); fail it when its stored spec no longer parses."""
    experiment = ExperimentRepository(session).get(experiment_id)
    if experiment is None or experiment.status != S.QUEUED:
        return None
    try:
        spec = ExperimentSpec.model_validate(experiment.spec)
    except ValidationError as exc:
        _fail_unclaimed(session, experiment, f"the stored spec is no longer valid: {exc}")
        return None
    moved = transition(
        session, experiment_id, [S.QUEUED], S.RUNNING, f"started on worker {worker_id}",
        attempts=experiment.attempts + 1, started_at=experiment.started_at or utcnow(),
        **leases.hold(worker_id, limits.lease_ttl_s),
    )  # fmt: skip
    session.commit()
    return spec if moved is not None else None


def _fail_unclaimed(session: Session, experiment: Experiment, reason: str) -> None:
    """Fail a queued run that cannot start (no lease is held yet, so no hold to check)."""
    transition(
        session, experiment.id, [experiment.status], S.FAILED, reason,
        finished_at=utcnow(), **leases.RELEASED,
    )  # fmt: skip
    session.commit()


def _cancel_requested(session_factory: sessionmaker[Session], experiment_id: str) -> bool:
    try:
        with session_factory() as session:
            return ExperimentRepository(session).status_of(experiment_id) == S.CANCELLING
    except SQLAlchemyError as exc:
        # The run goes on; it reads its status itself and the next poll asks again.
        log.warning("could not read the status of experiment %s: %s", experiment_id, exc)
        return False


def _database_url(session_factory: sessionmaker[Session]) -> str:
    """The URL the run's process opens its own engine on (a process never shares connections)."""
    bind = session_factory.kw.get("bind")
    if not isinstance(bind, Engine):
        raise TypeError("a run's process opens its own connections: bind the sessions to an engine")
    return bind.url.render_as_string(hide_password=False)


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
