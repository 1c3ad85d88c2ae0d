"""A worker's health, for a container's health check: a heartbeat file and ``marlforge
worker-health``.

Celery's remote control (``celery inspect ping``) is off in this service (``core.dispatch.queue``),
so the worker says it is well by itself: once it is ready, a daemon thread of the worker process
rewrites the heartbeat file (``MARLFORGE_WORKER_HEARTBEAT_FILE``) every
``MARLFORGE_WORKER_HEARTBEAT_INTERVAL_S``, but only when, at that moment,

- the worker's consumer holds a broker connection (Celery drops it, and the worker reconnects,
  after a connection error), and
- the broker answers on a fresh connection (Redis: ``PING``; the embedded broker: its folder is
  writable).

``marlforge worker-health`` exits 0 when the file was rewritten within
``MARLFORGE_WORKER_HEARTBEAT_STALE_S``, and 1 otherwise (no file, or a stale one), printing why.

What a fresh heartbeat proves: the worker process lives, it finished starting (its consumer was
ready: connected, queues declared), its consumer has a broker connection and the broker answers.
What it does not prove: that the consumer still takes messages over that connection (a worker can
stay connected and deaf; the consumer watchdog, ``workers.watchdog``, stops such a worker, and its
heartbeat ends with it), that the database answers, or that a running job makes progress (the run's
lease shows that: ``core.leases``). A worker busy with a long run stays healthy: the solo pool takes
one job at a time by design.

The file is removed when the worker starts (a file left by a previous worker in the same place must
not vouch for this one) and when it shuts down.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.dispatch.queue import Dispatcher
from core.settings import Settings

log = logging.getLogger(__name__)

Check = Callable[[], str | None]
"""Returns None when the worker is well, else why not (for a person)."""


class Heartbeat:
    """Rewrites ``path`` every ``interval_s`` while ``check`` finds nothing wrong."""

    def __init__(self, path: Path, interval_s: float, check: Check) -> None:
        self.path = path
        self.interval_s = interval_s
        self.check = check
        self._problem: str | None = None
        self._stop = threading.Event()
        # Held around every write and by ``stop``: no beat lands after the file is removed.
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="worker-heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop beating and remove the file: a worker that is going away is not healthy."""
        with self._lock:
            self._stop.set()
            clear(self.path)

    def beat(self) -> bool:
        """One look: rewrite the file if ``check`` passes; True when it was rewritten."""
        problem = self.check()
        if problem is not None:
            if problem != self._problem:
                log.warning("worker heartbeat withheld: %s", problem)
            self._problem = problem
            return False
        with self._lock:
            if self._stop.is_set():
                return False
            write(self.path)
        if self._problem is not None:
            log.info("worker heartbeat resumed")
            self._problem = None
        return True

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.beat()
            except Exception:
                # Never let one bad look end the thread; without beats the worker reads unhealthy.
                log.exception("worker heartbeat: a check failed")
            self._stop.wait(self.interval_s)


def consumer_check(consumer: Any, dispatcher: Dispatcher) -> Check:
    """The heartbeat's check for a Celery consumer (``worker_ready``'s sender): it holds a broker
    connection, and the broker answers a fresh one."""

    def check() -> str | None:
        connection = getattr(consumer, "connection", None)  # None while Celery reconnects
        if connection is None or not connection.connected:
            return "the worker's consumer has no broker connection"
        return dispatcher.unreachable_reason()

    return check


def write(path: Path) -> None:
    """Rewrite the heartbeat file (whole or not at all): this process's id and the time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    partial.write_text(f"pid {os.getpid()} at {time.time():.3f}\n")
    os.replace(partial, path)


def clear(path: Path) -> None:
    """Remove the heartbeat file if there is one."""
    path.unlink(missing_ok=True)


def problem(path: Path, stale_s: float, now: float | None = None) -> str | None:
    """None when ``path`` was written within ``stale_s``, else why the worker is not healthy."""
    try:
        written = path.stat().st_mtime
    except FileNotFoundError:
        return f"no heartbeat file at {path}: the worker is not ready, or it has stopped"
    age = (time.time() if now is None else now) - written
    if age > stale_s:
        return (
            f"the worker's last heartbeat is {age:.1f} s old (more than {stale_s:g} s): it is "
            "gone, or its consumer or the broker is not answering"
        )
    return None


def main(settings: Settings) -> int:
    """``marlforge worker-health``: 0 when the heartbeat is fresh, else 1; says why."""
    path = settings.worker_heartbeat_file
    found = problem(path, settings.worker_heartbeat_stale_s)
    if found is not None:
        print(f"unhealthy: {found}", flush=True)
        return 1
    print(f"healthy: heartbeat at {path} is fresh", flush=True)
    return 0
