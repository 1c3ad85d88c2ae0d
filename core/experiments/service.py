"""What can be done to an experiment: submit, cancel, resume (the API's and the CLI's services).

Each operation commits its database change first and only then talks to the broker, so a worker
never receives an id whose row it cannot read yet.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from core.db import utcnow
from core.dispatch import fair_share
from core.dispatch.queue import Dispatcher, requested_device, requested_suite, resource_class
from core.enums import RESUMABLE_STATUSES, EventKind, ExperimentStatus, ResourceClass
from core.errors import BrokerUnavailable, Conflict, NotFound
from core.experiments import warm_start
from core.experiments.checkpoints import CheckpointRepository
from core.experiments.events import EventRepository
from core.experiments.repository import ExperimentRepository
from core.idempotency import service as idempotency
from core.ids import new_id
from core.leases.repository import LeaseRepository
from core.lifecycle import transition
from core.models import Experiment
from learners.api import GPU_BACKENDS, ExperimentSpec

log = logging.getLogger(__name__)

S = ExperimentStatus


@dataclass(frozen=True)
class Actor:
    """Who asks for a change: the key's id (kept in the timeline) and how to name it to people."""

    key_id: str
    label: str


def get(session: Session, experiment_id: str) -> Experiment:
    """The experiment, or NotFound."""
    experiment = ExperimentRepository(session).get(experiment_id)
    if experiment is None:
        raise NotFound(f"no experiment with id {experiment_id!r}")
    return experiment


def submit(
    session: Session,
    dispatcher: Dispatcher,
    spec: ExperimentSpec,
    project_id: str,
    actor: Actor | None = None,
    claim: idempotency.Claim | None = None,
) -> Experiment:
    """Store a validated spec as a queued experiment of the project, then queue its run.

    With a ``claim`` the request's idempotency key is tied to the experiment in the same
    transaction; ``idempotency.KeyTaken`` (nothing stored or queued) when a concurrent request
    took the key first.
    """
    now = utcnow()
    experiment = Experiment(
        id=new_id(),
        project_id=project_id,
        created_by_key_id=actor.key_id if actor is not None else None,
        name=spec.name,
        algorithm=spec.algorithm,
        backend=spec.backend,
        spec=spec.model_dump(mode="json"),
        status=S.QUEUED,
        status_reason=None,
        step=0,
        total_steps=spec.total_steps,
        latest_metrics={},
        attempts=0,
        created_at=now,
        updated_at=now,
        **warm_start.columns(spec.model_dump(mode="json")),
    )
    experiments = ExperimentRepository(session)
    experiments.add(experiment)
    experiments.set_tags(experiment.id, spec.tags)
    reason = f"submitted by {actor.label}" if actor is not None else "submitted"
    EventRepository(session).add_transition(
        experiment.id, None, S.QUEUED, reason, actor.key_id if actor is not None else None
    )
    if claim is not None:
        idempotency.record(session, project_id, claim, experiment.id)
    session.commit()
    dispatch(session, dispatcher, experiment)
    return experiment


def submit_once(
    session: Session,
    dispatcher: Dispatcher,
    spec: ExperimentSpec,
    project_id: str,
    actor: Actor | None,
    claim: idempotency.Claim,
) -> tuple[Experiment, bool]:
    """``submit`` under an idempotency key that ``idempotency.lookup`` found new: the experiment
    and True, or, when a concurrent request with the key won the race, its experiment and False
    (IdempotencyConflict when that request's body differed)."""
    try:
        return submit(session, dispatcher, spec, project_id, actor, claim), True
    except idempotency.KeyTaken:
        return get(session, idempotency.winner(session, project_id, claim)), False


def edit(
    session: Session, experiment_id: str, changes: dict[str, Any], actor: Actor | None = None
) -> Experiment:
    """Change the experiment's name, tags or notes (``learners.spec.parse_edit``'s changes) in its
    stored spec, its ``name`` column and its tag index together; the run's log says who did.
    No changes change nothing."""
    experiment = get(session, experiment_id)
    if not changes:
        return experiment
    spec = {**experiment.spec, **changes}
    experiments = ExperimentRepository(session)
    experiments.set_labels(experiment_id, spec["name"], spec)
    if "tags" in changes:
        experiments.set_tags(experiment_id, changes["tags"])
    by = f" by {actor.label}" if actor is not None else ""
    message = f"{', '.join(sorted(changes))} edited{by}"
    EventRepository(session).add(
        experiment_id, EventKind.LOG, {"level": "info", "message": message, "step": experiment.step}
    )
    session.commit()
    return get(session, experiment_id)


def queue_position(session: Session, experiment: Experiment) -> int | None:
    """A queued experiment's place in its queue (1: next; ``core.dispatch.fair_share``), else None.
    A run queued before runs recorded their queue counts the runs of its queue queued before it."""
    if experiment.status != S.QUEUED:
        return None
    if experiment.queue is not None:
        return fair_share.position(session, experiment)
    backend = experiment.backend
    cuda = None
    if backend in GPU_BACKENDS:  # two queues: the GPU one (cuda), the plain one (the rest)
        cuda = resource_class(backend, requested_device(experiment.spec)) == ResourceClass.GPU
    return LeaseRepository(session).queue_position(
        experiment, cuda, requested_suite(experiment.spec)
    )


def cancel(session: Session, experiment_id: str, actor: Actor | None = None) -> Experiment:
    """A queued experiment is cancelled at once; a running one is asked to stop (``cancelling``),
    and its worker writes a final checkpoint and marks it cancelled."""
    by = f" by {actor.label}" if actor is not None else ""
    key_id = actor.key_id if actor is not None else None
    before_start = f"cancelled{by} before it started"
    done = transition(
        session, experiment_id, [S.PENDING, S.QUEUED], S.CANCELLED, before_start,
        actor=key_id, finished_at=utcnow(),
    )  # fmt: skip
    if done is None:
        transition(
            session, experiment_id, [S.RUNNING], S.CANCELLING, f"cancel requested{by}",
            actor=key_id,
        )  # fmt: skip
    session.commit()
    experiment = get(session, experiment_id)
    if experiment.status in (S.SUCCEEDED, S.FAILED):
        raise Conflict(f"experiment {experiment_id} already {experiment.status}; nothing to cancel")
    return experiment


def resume(
    session: Session, dispatcher: Dispatcher, experiment_id: str, actor: Actor | None = None
) -> Experiment:
    """Queue a cancelled or failed experiment again; it continues from its latest checkpoint. A
    sweep's run goes back to ``pending`` instead: its sweep's scheduler queues it when the sweep
    has a free slot (``core.sweeps.scheduler``)."""
    latest = CheckpointRepository(session).latest(experiment_id)
    by = f" by {actor.label}" if actor is not None else ""
    reason = (
        f"resumed{by} from the checkpoint at step {latest.step}"
        if latest is not None
        else f"resumed{by} from the start (no checkpoint was saved)"
    )
    in_sweep = get(session, experiment_id).sweep_id is not None
    if in_sweep:
        reason += "; waits for a slot of its sweep's max_concurrent"
    moved = transition(
        session, experiment_id, sorted(RESUMABLE_STATUSES), S.PENDING if in_sweep else S.QUEUED,
        reason,
        actor=actor.key_id if actor is not None else None, finished_at=None,
    )  # fmt: skip
    if moved is None:
        experiment = get(session, experiment_id)
        raise Conflict(
            f"experiment {experiment_id} is {experiment.status}; only cancelled or failed "
            "experiments can be resumed"
        )
    session.commit()
    experiment = get(session, experiment_id)
    if not in_sweep:
        dispatch(session, dispatcher, experiment)
    return experiment


def requeue_orphans(session: Session, dispatcher: Dispatcher) -> list[str]:
    """After an unclean stop of the only local worker: queue its interrupted runs again.

    Only for ``marlforge up``, which owns the single worker of its embedded broker, so any run still
    marked running at start-up has no worker behind it.
    """
    experiments = ExperimentRepository(session)
    for experiment_id in experiments.ids_with_status([S.CANCELLING]):
        reason = "cancelled while the local worker was down"
        transition(
            session, experiment_id, [S.CANCELLING], S.CANCELLED, reason,
            finished_at=utcnow(), lease_expires_at=None,
        )  # fmt: skip
    orphans = experiments.ids_with_status([S.RUNNING])
    for experiment_id in orphans:
        reason = "the local worker stopped during the run; it continues from its latest checkpoint"
        transition(
            session, experiment_id, [S.RUNNING], S.QUEUED, reason,
            lease_expires_at=None, interrupted_at=utcnow(),
        )  # fmt: skip
    session.commit()
    for experiment_id in orphans:
        dispatch(session, dispatcher, get(session, experiment_id))
    return orphans


def dispatch(session: Session, dispatcher: Dispatcher, experiment: Experiment) -> None:
    """Queue the (committed, ``queued``) experiment's run on the queue its spec's device needs
    (``core.dispatch.queue.queue_for``), recorded on the run first (``core.dispatch.fair_share``); a
    broker that refuses fails the run with the reason, and BrokerUnavailable tells the caller. Every
    path that queues a run comes through here."""
    device, suite = requested_device(experiment.spec), requested_suite(experiment.spec)
    queue = dispatcher.queue_of(experiment.backend, device, suite)
    if experiment.queue != queue:
        ExperimentRepository(session).set_queue(experiment.id, queue)
        session.commit()
    try:
        dispatcher.enqueue(experiment.id, experiment.backend, device, suite)
    except Exception as exc:  # kombu raises several types; all mean the job was not queued
        log.exception("could not queue experiment %s", experiment.id)
        reason = f"could not queue the run: the broker is unreachable ({exc})"
        transition(session, experiment.id, [S.QUEUED], S.FAILED, reason, finished_at=utcnow())
        session.commit()
        raise BrokerUnavailable(
            f"experiment {experiment.id} was stored but could not be queued: {exc}; "
            "it is marked failed and can be resumed once the broker is back"
        ) from exc
