"""``/v1/workers``: the registry of workers (``core.fleet.registry``), so that an operator who adds
a host (a GPU host, say) sees it registered, and a user sees what their ``cuda`` run waits for.

Workers are shared by every project: they are not a project's data, so any valid key (``viewer``
and up) may list them, and the list is the same for every project. It still goes through
``authorize`` like every route but the open ones: host names and queue names are not for the
whole network. An item holds only what a worker says about itself in its row; the worker's
settings (its database, broker and store URLs, its environment) are never stored there.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Query

from api.auth import project_router
from api.deps import ServicesDep, SessionDep
from api.errors import error_responses
from api.schemas.workers import RegisteredWorkerOut, WorkerList
from core.enums import ResourceClass
from core.fleet import registry
from core.fleet.repository import WorkerRepository
from learners.api import Backend

router = project_router("/v1/workers", ["workers"])


@router.get(
    "",
    response_model=WorkerList,
    summary="List workers",
    description="The workers of the deployment, shared by all projects (any key may read them): "
    "one item per worker and backend whose queues it consumes, with its host, queues, resource "
    "class (`cpu`, or `gpu` with the GPUs its framework sees), when it started and when it was "
    "last seen, and whether it is `live` (seen within `MARLFORGE_WORKER_HEARTBEAT_STALE_S`). "
    "By default every row the registry holds, live or not (a killed worker's row stays a day, "
    "stale); `live=true` keeps only the live ones, `live=false` only the stale ones. Filters "
    "combine with AND: `backend`, `resource_class`, `live`. By worker id, then backend.",
    responses=error_responses(422),
)
def list_workers(
    session: SessionDep,
    services: ServicesDep,
    backend: Annotated[Backend | None, Query(description="Only this backend.")] = None,
    resource_class: Annotated[
        ResourceClass | None, Query(description="Only this resource class (`cpu` or `gpu`).")
    ] = None,
    live: Annotated[
        bool | None,
        Query(description="`true`: only live workers; `false`: only stale ones; left out: both."),
    ] = None,
) -> WorkerList:
    stale_s = services.settings.worker_heartbeat_stale_s
    since = registry.live_since(stale_s)
    rows = WorkerRepository(session).listing(
        since, backend=backend, resource=resource_class, live=live
    )
    items = [RegisteredWorkerOut.of(row, since) for row in rows]
    return WorkerList(items=items, stale_after_s=stale_s)
