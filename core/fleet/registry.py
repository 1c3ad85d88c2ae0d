"""The registry of workers: who consumes which queues on what, and why a run waits for a GPU.

A worker says who it is in the ``workers`` table: one row per backend whose queues it consumes,
with those queues, its resource class (``gpu`` when it consumes the backend's ``-gpu`` queue,
``core.dispatch.queue``), the GPUs its framework sees, when it started and when it was last seen. It
writes its rows when its consumer is ready, refreshes them on a heartbeat (``beat``, every
``MARLFORGE_WORKER_HEARTBEAT_INTERVAL_S``; rows that went missing are written again) and deletes
them when it shuts down cleanly (``unregister``). A killed worker's rows stop being refreshed:
a reader counts a row as live only while it was seen within ``MARLFORGE_WORKER_HEARTBEAT_STALE_S``,
and a worker that registers deletes the rows not seen for ``FORGET_AFTER``.

The API reads it to say what a queued run waits for, in its ``status_reason``, computed when it is
read (``status_reasons``: one query per kind for a whole page), so it is true at every read and
nothing has to clear it when the worker arrives: a run queued on a GPU queue (its spec asks for
``cuda``) while no live GPU worker of its backend is registered, and a run whose environment suite
no live worker of its backend serves (each row lists the suites its worker serves) while some live
worker of that backend is there.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from core.db import utcnow
from core.dispatch.queue import declared_queues, requested_device, resource_class
from core.enums import ExperimentStatus, ResourceClass
from core.fleet.repository import WorkerRepository
from core.models import Experiment, WorkerRecord
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
    suites: tuple[str, ...] = ()
    """The environment suites it serves."""


def registrations(
    settings: Settings,
    worker_id: str,
    hostname: str,
    queues: Sequence[str],
    gpus: Mapping[Backend, Sequence[str]],
    suites: Sequence[str] = (),
) -> list[Registration]:
    """A worker's rows, read from the queues it consumes (in its order; queues that are not the
    service's are left out): one per backend, of class ``gpu`` when it consumes that backend's GPU
    queue, with the GPUs ``gpus`` names for it and the environment suites it serves."""
    known = {r.name: (r.backend, r.resource) for r in declared_queues(settings)}
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
            tuple(suites),
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
        suites=list(row.suites),
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
    since = live_since(stale_s, now)
    waiting = [e for e in experiments if needs_gpu_worker(e)]
    if waiting:
        live = WorkerRepository(session).backends_with(ResourceClass.GPU, since)
        for experiment in waiting:
            if experiment.backend not in live:
                _add(reasons, experiment, waiting_for_gpu(experiment.backend))
    queued = [e for e in experiments if e.status == ExperimentStatus.QUEUED]
    if queued:
        served = WorkerRepository(session).suites_served(since)
        for experiment in queued:
            suite = str((experiment.spec or {}).get("env", {}).get("suite", ""))
            offered = served.get(experiment.backend)
            if offered is not None and suite not in offered:
                _add(reasons, experiment, waiting_for_suite(experiment.backend, suite, offered))
    return reasons


def _add(reasons: dict[str, str | None], experiment: Experiment, why: str) -> None:
    """Append ``why`` to the experiment's reason (after the stored one, when there is one)."""
    before = reasons[experiment.id]
    reasons[experiment.id] = f"{before}; {why}" if before else why


def waiting_for_suite(backend: Backend, suite: str, offered: set[str]) -> str:
    """Why a queued run of ``suite`` has not started: the live workers of its backend serve only
    ``offered``."""
    return (
        f"waiting for a worker that serves the {suite} environments: the live {backend} workers "
        f"serve {', '.join(sorted(offered)) or 'no suite'} (docs/environments.md, "
        "'Which workers serve a suite')"
    )
