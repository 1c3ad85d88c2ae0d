"""The registry of workers: who consumes which queues on what, and why a run waits for a GPU.

A worker says who it is in the ``workers`` table: one row per backend whose queues it consumes,
with those queues, its resource class (``gpu`` when it consumes the backend's ``-gpu`` queue,
``core.queue``), the GPUs its framework sees, when it started and when it was last seen. It writes
its rows when its consumer is ready, refreshes them on a heartbeat (``beat``, every
``MARLFORGE_WORKER_HEARTBEAT_INTERVAL_S``; rows that went missing are written again) and deletes
them when it shuts down cleanly (``unregister``). A killed worker's rows stop being refreshed:
a reader counts a row as live only while it was seen within ``MARLFORGE_WORKER_HEARTBEAT_STALE_S``,
and a worker that registers deletes the rows not seen for ``FORGET_AFTER``.

The API reads it for one thing: a run queued on a GPU queue (its spec asks for ``cuda``) while no
live GPU worker of its backend is registered says so in its ``status_reason``, computed when it is
read (``status_reasons``: one query for a whole page, none when no run on it needs a GPU), so it is
true at every read and nothing has to clear it when a GPU worker arrives.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from core.db import utcnow
from core.enums import ExperimentStatus, ResourceClass
from core.models import Experiment, WorkerRecord
from core.queue import declared_queues, requested_device, resource_class
from core.repositories.workers import WorkerRepository
from core.settings import Settings
from learners.api import Backend

FORGET_AFTER = dt.timedelta(days=1)
"""A row not seen for this long is deleted when a worker registers (a worker long gone)."""
GPU_HOST_DOCS = "docs/deployment.md, 'A GPU host'"


@dataclass(frozen=True)
class Registration:
    """What a worker says about itself for one backend it consumes."""

    worker_id: str
    hostname: str
    backend: Backend
    queues: tuple[str, ...]
    resource_class: ResourceClass
    gpus: tuple[str, ...]


def registrations(
    settings: Settings,
    worker_id: str,
    hostname: str,
    queues: Sequence[str],
    gpus: Mapping[Backend, Sequence[str]],
) -> list[Registration]:
    """A worker's rows, read from the queues it consumes (in its order; queues that are not the
    service's are left out): one per backend, of class ``gpu`` when it consumes that backend's GPU
    queue, with the GPUs ``gpus`` names for it."""
    known = {name: (backend, klass) for backend, klass, name in declared_queues(settings)}
    consumed: dict[Backend, list[str]] = {}
    on_gpu: set[Backend] = set()
    for queue in queues:
        if queue not in known:
            continue
        backend, klass = known[queue]
        consumed.setdefault(backend, []).append(queue)
        if klass == ResourceClass.GPU:
            on_gpu.add(backend)
    return [
        Registration(
            worker_id,
            hostname,
            backend,
            tuple(names),
            ResourceClass.GPU if backend in on_gpu else ResourceClass.CPU,
            tuple(gpus.get(backend, ())) if backend in on_gpu else (),
        )
        for backend, names in consumed.items()
    ]


def beat(
    session_factory: sessionmaker[Session],
    rows: Sequence[Registration],
    started_at: dt.datetime,
    now: dt.datetime | None = None,
) -> None:
    """Refresh the worker's rows (``last_seen_at``); write them whole when any is missing (the
    first beat, or after a purge). Raises the database's error when it cannot be reached."""
    if not rows:
        return
    now = now or utcnow()
    with session_factory() as session:
        workers = WorkerRepository(session)
        if workers.touch(rows[0].worker_id, now) < len(rows):
            workers.forget_before(now - FORGET_AFTER)
            workers.put([_record(row, started_at, now) for row in rows])
        session.commit()


def unregister(session_factory: sessionmaker[Session], worker_id: str) -> int:
    """Delete the worker's rows (a clean shutdown); how many there were."""
    with session_factory() as session:
        removed = WorkerRepository(session).remove(worker_id)
        session.commit()
    return removed


def _record(row: Registration, started_at: dt.datetime, now: dt.datetime) -> WorkerRecord:
    return WorkerRecord(
        id=row.worker_id,
        backend=row.backend,
        hostname=row.hostname,
        queues=list(row.queues),
        resource_class=row.resource_class,
        gpus=list(row.gpus),
        started_at=started_at,
        last_seen_at=now,
    )


def live_since(stale_s: float, now: dt.datetime | None = None) -> dt.datetime:
    """The oldest ``last_seen_at`` of a live worker."""
    return (now or utcnow()) - dt.timedelta(seconds=stale_s)


def needs_gpu_worker(experiment: Experiment) -> bool:
    """True for a queued run whose spec sends it to its backend's GPU queue."""
    if experiment.status != ExperimentStatus.QUEUED:
        return False
    device = requested_device(experiment.spec or {})
    return resource_class(experiment.backend, device) == ResourceClass.GPU


def waiting_for_gpu(backend: Backend) -> str:
    """Why a run for ``backend`` that needs a GPU has not started."""
    return (
        f"waiting for a GPU worker: no {backend} worker with a GPU is registered ({GPU_HOST_DOCS})"
    )


def status_reasons(
    session: Session,
    experiments: Sequence[Experiment],
    stale_s: float,
    now: dt.datetime | None = None,
) -> dict[str, str | None]:
    """Each experiment's ``status_reason`` as the API shows it: the stored one, and for a run
    that waits on a GPU queue with no live GPU worker of its backend, why (after the stored one,
    when there is one: a requeue after a lost worker says what happened first)."""
    reasons = {e.id: e.status_reason for e in experiments}
    waiting = [e for e in experiments if needs_gpu_worker(e)]
    if not waiting:
        return reasons
    live = WorkerRepository(session).backends_with(ResourceClass.GPU, live_since(stale_s, now))
    for experiment in waiting:
        if experiment.backend in live:
            continue
        why = waiting_for_gpu(experiment.backend)
        stored = experiment.status_reason
        reasons[experiment.id] = f"{stored}; {why}" if stored else why
    return reasons
