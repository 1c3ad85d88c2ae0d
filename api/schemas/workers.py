"""The bodies of ``/v1/workers``: the registry of workers (``core.fleet.registry``)."""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel, Field

from core.enums import ResourceClass
from core.models import WorkerRecord
from learners.api import Backend


class RegisteredWorkerOut(BaseModel):
    """A worker of the registry, for one backend whose queues it consumes (a worker of several
    backends is one item per backend). Only what the worker says about itself: never its
    settings, URLs or environment."""

    id: str = Field(description="The worker's name (`MARLFORGE_WORKER_NAME`, or `<host>-<pid>`).")
    hostname: str = Field(description="The host it runs on.")
    backend: Backend
    resource_class: ResourceClass = Field(
        description="`gpu` when it consumes the backend's GPU queue (`marlforge worker --gpu` on "
        "a host whose framework sees a GPU), else `cpu`."
    )
    queues: list[str] = Field(
        description="The broker queues of this backend it consumes, in the order it reads them "
        "(a GPU worker's `<backend>-gpu` queue first)."
    )
    gpus: list[str] = Field(
        description="The names of the GPUs the backend's framework sees there (`[]` for `cpu`)."
    )
    suites: list[str] | None = Field(
        description="The environment suites it serves (`MARLFORGE_WORKER_SUITES`, else every "
        "suite it can build); `null` for a worker from before workers reported them, which "
        "counts as serving every suite."
    )
    started_at: dt.datetime = Field(description="When the worker started.")
    last_seen_at: dt.datetime = Field(description="Its latest heartbeat.")
    live: bool = Field(
        description="Seen within `MARLFORGE_WORKER_HEARTBEAT_STALE_S` (`stale_after_s`): it "
        "takes runs. A worker that stopped cleanly has no row; one that was killed keeps a "
        "stale row (`false`) for a day."
    )

    @classmethod
    def of(cls, row: WorkerRecord, live_since: dt.datetime) -> RegisteredWorkerOut:
        """The response for a database row; live when it was seen at or after ``live_since``."""
        return cls(
            id=row.id,
            hostname=row.hostname,
            backend=row.backend,
            resource_class=row.resource_class,
            queues=[str(q) for q in row.queues],
            gpus=[str(g) for g in row.gpus],
            suites=None if row.suites is None else [str(s) for s in row.suites],
            started_at=row.started_at,
            last_seen_at=row.last_seen_at,
            live=row.last_seen_at >= live_since,
        )


class WorkerList(BaseModel):
    """The workers the registry holds, by id and backend (not paged: a row per worker and
    backend, and rows not seen for a day are deleted)."""

    items: list[RegisteredWorkerOut]
    stale_after_s: float = Field(
        description="`MARLFORGE_WORKER_HEARTBEAT_STALE_S`: a worker not seen for this long is "
        "not live."
    )
