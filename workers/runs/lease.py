"""The worker's side of a run's lease (``core.leases``): renewed every poll while the run's process
lives, and the answer to whether that process may go on."""

from __future__ import annotations

import logging
import time

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from core.leases import service as leases

log = logging.getLogger(__name__)


class Lease:
    """The worker's hold on one run: ``renew`` is the supervisor's ``still_held``
    (``workers.supervisor``), called every poll while the run's process lives."""

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
        """Extend the lease; whether the run's process may go on."""
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
        return self._released_recently()

    def _released_recently(self) -> bool:
        """Released: most often the run's own process has just recorded its end (a shutdown's
        return to the queue too) and is about to report it; stopping it now would lose that
        report. Whoever released it, the process can no longer write, so it stops by itself:
        give it the lease's length to do so."""
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
