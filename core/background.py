"""Work a process does beside its main job, on a timer: a daemon thread per job (the API's
reaper, compactor and schedulers beside its requests; a worker's registry heartbeat,
``workers.presence``).

``Periodic`` calls ``work`` after ``first_delay_s`` and then every ``interval_s`` (or after the
delay ``work`` returns) until ``stop``. A pass that fails, the database down included, is logged
and the next one comes as planned: one bad pass never ends the thread.
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from typing import Self

from sqlalchemy.exc import SQLAlchemyError

log = logging.getLogger(__name__)


class Periodic(ABC):
    """A job of the API process on a timer (see the module's docstring); subclasses give
    ``work``."""

    def __init__(self, name: str, interval_s: float, first_delay_s: float | None = None) -> None:
        self.name = name
        self.interval_s = interval_s
        self.first_delay_s = interval_s if first_delay_s is None else first_delay_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    @abstractmethod
    def work(self) -> float | None:
        """One pass; the delay before the next one, or None for ``interval_s``."""

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    def _loop(self) -> None:
        delay = self.first_delay_s
        while not self._stop.wait(delay):
            delay = self.interval_s
            try:
                delay = self.work() or self.interval_s
            except SQLAlchemyError as exc:
                log.warning("%s: the database is unreachable: %s", self.name, exc)
            except Exception:
                log.exception("%s: a pass failed", self.name)
