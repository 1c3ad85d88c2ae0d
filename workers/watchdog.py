"""A worker that has stopped consuming notices it and exits, so that its supervisor restarts it.

Celery's Redis transport can leave a worker alive, connected and deaf: when a job's
acknowledgement fails because Redis is down (the run ended during the outage), the worker logs
``Couldn't ack ... ConnectionError`` and, once Redis is back, never takes another message (a
long-standing Celery/kombu failure: celery issues 8030, 9054, 10205, 10302). Its process looks
healthy to anything that only asks whether it is alive.

So the worker checks what it does, not whether it lives: every ``interval_s`` a thread asks the
broker how many messages wait in the worker's own queues. A worker that is idle (no job in hand)
while messages have waited in its queues for ``deaf_after_s`` is not consuming: any healthy idle
worker of those queues, itself included, would have taken them. It then logs why and stops itself
(SIGTERM: a warm shutdown, nothing to checkpoint since it is idle; a hard exit if that hangs), and
``marlforge up``, the compose file's ``restart: unless-stopped`` or any process supervisor starts
a fresh one, which consumes. A worker busy with a long run is never judged: its solo pool takes
one job at a time by design.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from kombu.exceptions import ChannelError

log = logging.getLogger(__name__)

DEAF_EXIT_CODE = 75
"""The exit code of a worker that stopped itself for not consuming (EX_TEMPFAIL: try again)."""


class Watchdog:
    """Watches one worker (see the module's docstring)."""

    def __init__(
        self,
        waiting: Callable[[], int],
        busy: Callable[[], bool],
        deaf_after_s: float,
        interval_s: float = 5.0,
        on_deaf: Callable[[str], None] | None = None,
    ) -> None:
        self.waiting = waiting
        self.busy = busy
        self.deaf_after_s = deaf_after_s
        self.interval_s = interval_s
        self.on_deaf = on_deaf or stop_this_worker
        self._since: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="consumer-watchdog", daemon=True)

    def start(self) -> Watchdog:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def check(self, now: float) -> str | None:
        """One look; the reason to stop when the worker has been deaf for ``deaf_after_s``."""
        if self.busy():
            self._since = None
            return None
        try:
            count = self.waiting()
        except Exception as exc:  # the broker is down: nothing can be consumed, nobody is deaf
            log.info("watchdog: cannot read the queues (%s); checking again later", exc)
            self._since = None
            return None
        if count == 0:
            self._since = None
            return None
        if self._since is None:
            self._since = now
            return None
        waited = now - self._since
        if waited < self.deaf_after_s:
            return None
        return (
            f"this worker is idle while {count} message(s) have waited in its queues for "
            f"{waited:.0f} s: it is not consuming (a lost broker connection); stopping it so "
            "that it is restarted"
        )

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            reason = self.check(time.monotonic())
            if reason is not None:
                log.critical(reason)
                self.on_deaf(reason)
                return


def stop_this_worker(reason: str, grace_s: float = 30.0) -> None:
    """Warm-shut this worker down (it is idle); exit hard if it has not stopped in ``grace_s``."""
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(grace_s)
    log.critical("the worker did not stop within %.0f s; exiting: %s", grace_s, reason)
    os._exit(DEAF_EXIT_CODE)


def queue_lengths(app: object, queues: Sequence[str]) -> Callable[[], int]:
    """How many messages wait in ``queues``, asked of the broker on a connection of its own (the
    consumer's may be the broken one)."""

    def count() -> int:
        with app.connection_for_read() as connection:  # type: ignore[attr-defined]
            connection.ensure_connection(max_retries=1, timeout=3)
            channel = connection.default_channel
            return sum(_length(channel, q) for q in queues)

    return count


def _length(channel: Any, queue: str) -> int:
    try:
        return int(channel.queue_declare(queue=queue, passive=True).message_count)
    except ChannelError:
        # Redis keeps no empty queue, and a restarted Redis none of the declarations: no queue
        # there holds no message.
        return 0
