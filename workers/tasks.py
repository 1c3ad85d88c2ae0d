"""The Celery tasks: take an experiment (or match) id, run (or play) it, tell the broker how it
went.

Everything else is in ``workers.runs`` and ``workers.matches``, which tests call without a broker.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from celery import Task
from celery.exceptions import Reject
from celery.signals import worker_shutting_down
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from core.db import make_engine, make_session_factory
from core.dispatch.queue import (
    MATCH_TASK,
    RUN_TASK,
    CeleryDispatcher,
    requested_device,
    requested_suite,
)
from core.enums import ExperimentStatus
from core.experiments.repository import ExperimentRepository
from core.settings import get_settings
from core.storage import ArtifactStore, store_for
from core.streaming import publish_after_commit, publisher_for
from workers import matches
from workers.app import app
from workers.outcome import Outcome, RunLimits
from workers.presence import worker_id
from workers.runs.job import run_experiment

log = logging.getLogger(__name__)

# Set by the worker's SIGTERM/SIGINT handler: the running job checkpoints, stops and is requeued.
_shutdown = threading.Event()


@worker_shutting_down.connect  # type: ignore[untyped-decorator]  # celery has no type hints
def _on_worker_shutting_down(**_: Any) -> None:
    _shutdown.set()


@lru_cache(maxsize=1)
def _session_factory() -> sessionmaker[Session]:
    settings = get_settings()
    factory = make_session_factory(make_engine(settings.database_url))
    # Streams in the API are woken as soon as this worker commits events (with Redis).
    publish_after_commit(factory, publisher_for(settings))
    return factory


def _limits() -> RunLimits:
    settings = get_settings()
    return RunLimits(
        poll_interval_s=settings.poll_interval_s,
        time_limit_s=settings.run_time_limit_s,
        lease_ttl_s=settings.lease_ttl_s,
        memory_mb=settings.run_memory_mb,
        cancel_grace_s=settings.cancel_grace_s,
        store_outage_s=settings.store_outage_s,
        checkpoint_bytes=settings.run_max_checkpoint_mb * 2**20,
        project_artifact_bytes=settings.project_max_artifact_mb * 2**20,
    )


@app.task(name=RUN_TASK, bind=True, max_retries=20)  # type: ignore[untyped-decorator]
def run_experiment_task(self: Task, experiment_id: str) -> str:
    """Run one experiment; ``experiment_id`` is all the message carries."""
    return _consume(
        self,
        f"experiment {experiment_id}",
        lambda storage: run_experiment(
            experiment_id,
            _session_factory(),
            storage,
            _limits(),
            _shutdown.is_set,
            worker_id(),
            on_swapped=_send_again,
        ),
    )


@lru_cache(maxsize=1)
def _dispatcher() -> CeleryDispatcher:
    return CeleryDispatcher(get_settings(), app)


def _send_again(experiment_id: str) -> None:
    """Send a message for a queued run whose message this worker used to start a fairer run of
    its queue (``core.dispatch.fair_share``). A broker that refuses is left to the API's reconciler,
    which sends a queued run's missing message again (``core.dispatch.reconcile``)."""
    try:
        with _session_factory()() as session:
            experiment = ExperimentRepository(session).get(experiment_id)
            if experiment is None or experiment.status != ExperimentStatus.QUEUED:
                return
            backend, spec = experiment.backend, experiment.spec
        _dispatcher().enqueue(experiment_id, backend, requested_device(spec), requested_suite(spec))
    except Exception as exc:  # the broker's or the database's; the reconciler covers both
        log.warning("could not send experiment %s's message again: %s", experiment_id, exc)


@app.task(name=MATCH_TASK, bind=True, max_retries=20)  # type: ignore[untyped-decorator]
def play_match_task(self: Task, match_id: str) -> str:
    """Play one match; ``match_id`` is all the message carries."""
    return _consume(
        self,
        f"match {match_id}",
        lambda storage: matches.play(
            match_id, _session_factory(), storage, _limits(), worker_id(), _shutdown.is_set
        ),
    )


def _consume(task: Task, what: str, job: Callable[[ArtifactStore], Outcome]) -> str:
    """Do ``job`` for one message, and tell the broker how it went: a worker stopping hands the
    message back (before the job starts, or when the job asks to be requeued); a database that
    cannot be reached has the message tried again later instead of dropped."""
    if _shutdown.is_set():
        # A job handed over while the worker is stopping waits for the next worker untouched.
        raise Reject(f"worker shutting down; {what} not started", requeue=True)
    try:
        outcome = job(store_for(get_settings()))
    except OperationalError as exc:
        log.warning("database unavailable for %s: %s", what, exc)
        raise task.retry(exc=exc, countdown=15) from exc
    if outcome == Outcome.REQUEUE:
        raise Reject(f"worker shutting down; {what} requeued", requeue=True)
    if outcome == Outcome.ELSEWHERE:
        # Only a message on a queue this worker should not consume (sent before an upgrade, or by
        # hand) gets here: it is dropped and the run stays queued; the API's reconciler
        # (``core.dispatch.reconcile``) sends it again to its suite's queue.
        log.warning("%s is for a suite this worker does not serve; dropping its message", what)
    return outcome.value
