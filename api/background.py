"""The API process's background loops, started and stopped with the app (its lifespan), so every
way of serving the API runs them: ``marlforge api``, ``uvicorn --factory api.app:create_app``,
or any ASGI server given ``create_app()``.

- the reaper (``core.leases.service.Reaper``): a run whose worker was lost (its lease lapsed) is
  queued again and resumes from its latest checkpoint;
- the reconciler (``core.dispatch.reconcile.Reconciler``): a queued run whose message the broker
  lost is sent again (the database is the queue of record);
- the compactor (``core.retention.service.Compactor``): runs whose retention has passed are
  compacted;
- the purger (``core.idempotency.service.Purger``): idempotency keys older than a day are
  forgotten;
- the sweep scheduler (``core.sweeps.scheduler.SweepScheduler``): sweeps' pending runs start as
  slots free up.

Each is a daemon thread on a timer (``core.background.Periodic``); several API processes may run
them side by side (every pass is a conditional write).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from core.background import Periodic
from core.dispatch.queue import Dispatcher
from core.dispatch.reconcile import Reconciler
from core.idempotency.service import Purger
from core.leases.service import Reaper
from core.retention.service import Compactor
from core.settings import Settings
from core.sweeps.proposals import admission
from core.sweeps.scheduler import SweepScheduler


@dataclass
class BackgroundLoops:
    """The loops of one API process, started together and stopped in the reverse order."""

    loops: tuple[Periodic, ...]

    def stop(self) -> None:
        for loop in reversed(self.loops):
            loop.stop()


def start_background_loops(
    settings: Settings, session_factory: sessionmaker[Session], dispatcher: Dispatcher
) -> BackgroundLoops:
    """Start the reaper, the reconciler, the compactor, the purger and the sweep scheduler on
    ``session_factory`` and ``dispatcher`` (the app's own)."""
    reconciler = Reconciler(
        session_factory, dispatcher, settings.dispatch_grace_s, settings.reconcile_interval_s
    )
    loops = (
        Reaper(session_factory, dispatcher, settings.lease_ttl_s, settings.reaper_interval_s),
        *((reconciler,) if settings.reconcile_interval_s > 0 else ()),
        Compactor(session_factory, settings),
        Purger(session_factory),
        SweepScheduler(
            session_factory,
            dispatcher,
            settings.project_max_active_runs,
            settings.sweep_interval_s,
            admission(settings),
        ),
    )
    for loop in loops:
        loop.start()
    return BackgroundLoops(loops)
