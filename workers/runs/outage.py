"""Waiting out an unreachable database: a run's reports and checkpoint records are tried again
while the database is away (a restart, a failover, a cut network), for up to the outage a run may
wait (``database_outage_s``: the worker passes most of the lease's length); longer, the run fails
with the database's error (``DatabaseOutage``): its lease would lapse anyway."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy.exc import DBAPIError

from core.db import is_transient, retry_transient

log = logging.getLogger(__name__)


class DatabaseOutage(RuntimeError):
    """The database stayed unreachable for longer than a run may wait for it."""


class Patience:
    """How long the database has been away for one run, and what a failed write means."""

    def __init__(self, experiment_id: str, database_outage_s: float) -> None:
        self.experiment_id = experiment_id
        self.database_outage_s = database_outage_s
        self.since: float | None = None
        """When the current outage began (``time.monotonic``); None while the database answers."""
        self._step = 0

    def failed(self, exc: Exception, step: int) -> None:
        """Note a failed write at ``step``: re-raise anything but an unreachable database, and
        an outage longer than ``database_outage_s``."""
        if not (isinstance(exc, DBAPIError) and is_transient(exc)):
            raise exc
        now = time.monotonic()
        if self.since is None:
            self.since, self._step = now, step
        away = now - self.since
        if away >= self.database_outage_s:
            raise DatabaseOutage(
                f"the database was unreachable for {away:.0f} s from step {self._step:,}, "
                f"longer than a run waits for it ({self.database_outage_s:.0f} s): "
                f"{type(exc.orig).__name__}: {str(exc.orig).strip()}"
            ) from exc
        log.warning(
            "[%s] the database is unreachable (%.0f s so far); the run goes on and its reports "
            "wait", self.experiment_id, away,
        )  # fmt: skip

    def back(self) -> str | None:
        """After a write that reached the database: what the run's log should say of the outage
        just ended, or None when there was none."""
        if self.since is None:
            return None
        away = time.monotonic() - self.since
        self.since = None
        return (
            f"the database was unreachable for {away:.0f} s from step {self._step:,}; "
            "the run went on and its reports were written when it came back"
        )

    def run(self, operation: Callable[[], Any], what: str, step: int) -> tuple[Any, str | None]:
        """``operation`` (a transaction) retried while the database is unreachable, for up to
        ``database_outage_s`` in all (then ``DatabaseOutage``); its result, and ``back()``'s."""
        while True:
            try:
                result = retry_transient(operation, what)
            except Exception as exc:
                self.failed(exc, step)
                continue
            return result, self.back()
