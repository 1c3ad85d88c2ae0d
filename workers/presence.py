"""This worker's presence in the registry of workers (``core.fleet.registry``): its rows written
when its consumer is ready, refreshed on a heartbeat, deleted when it shuts down.

The rows say what the worker consumes (read from its queues), the environment suites it serves
(``served_suites``) and, for a GPU worker, the GPUs it found when it started (``workers.launch``
hands them over with ``announce``). A database that does not answer only delays a beat: the
worker keeps consuming, and a beat that finds its rows gone writes them again.
"""

from __future__ import annotations

import datetime as dt
import logging
import socket
from collections.abc import Mapping, Sequence
from functools import lru_cache

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from core.background import Periodic
from core.db import make_engine, make_session_factory, utcnow
from core.fleet import registry
from core.leases import service as leases
from core.settings import Settings, get_settings
from learners.api import Backend, buildable_suites

log = logging.getLogger(__name__)

_announced: dict[Backend, list[str]] = {}


@lru_cache(maxsize=1)
def worker_id() -> str:
    """This worker's name in the registry and in the leases of the runs it holds
    (``MARLFORGE_WORKER_NAME``, else ``<host>-<pid>``)."""
    return get_settings().worker_name or leases.default_worker_id()


@lru_cache(maxsize=1)
def served_suites() -> tuple[str, ...]:
    """The environment suites this worker serves: those named by ``MARLFORGE_WORKER_SUITES``
    that it can build, or every one it can build when the setting is empty."""
    buildable = buildable_suites()
    wanted = [s.strip() for s in get_settings().worker_suites.split(",") if s.strip()]
    if not wanted:
        return buildable
    unknown = [s for s in wanted if s not in buildable]
    if unknown:
        log.warning(
            "MARLFORGE_WORKER_SUITES names suites this host cannot build: %s (it can: %s)",
            ", ".join(unknown),
            ", ".join(buildable),
        )
    return tuple(s for s in wanted if s in buildable)


def announce(gpus: Mapping[Backend, Sequence[str]]) -> None:
    """The GPUs each backend's framework found on this host (``workers.launch``, before the
    worker starts), for the registry's rows."""
    _announced.clear()
    _announced.update({backend: list(names) for backend, names in gpus.items()})


class Presence(Periodic):
    """Keeps this worker's rows in the registry fresh until ``stop``, which deletes them."""

    def __init__(
        self,
        session_factory: sessionmaker[Session],
        rows: Sequence[registry.Registration],
        interval_s: float,
    ) -> None:
        super().__init__("worker-registry", interval_s, first_delay_s=0.0)
        self.session_factory = session_factory
        self.rows = list(rows)
        self.started_at: dt.datetime = utcnow()

    def work(self) -> None:
        registry.beat(self.session_factory, self.rows, self.started_at)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop beating (a beat under way ends first), then delete the rows: a worker that is
        going away takes no more runs."""
        super().stop(timeout_s)
        if not self.rows:
            return
        try:
            registry.unregister(self.session_factory, self.rows[0].worker_id)
        except SQLAlchemyError as exc:
            log.warning("could not remove this worker from the registry (it goes stale): %s", exc)


def presence_for(settings: Settings, queues: Sequence[str]) -> Presence:
    """The presence of this worker, consuming ``queues``, on a connection pool of its own."""
    rows = registry.registrations(
        settings, worker_id(), socket.gethostname(), queues, _announced, served_suites()
    )
    factory = make_session_factory(make_engine(settings.database_url))
    return Presence(factory, rows, settings.worker_heartbeat_interval_s)
