"""The Celery app the workers run: ``celery -A workers.app worker`` (or ``marlforge worker``).

Its configuration (queues, late acknowledgement, prefetch of one, visibility timeout) comes from
``core.dispatch.queue`` so that the API, which only sends, and the workers agree on it. When a
worker starts it caps the frameworks' CPU threads (``workers.threads``), before any job imports one;
once its consumer is ready it keeps a heartbeat file fresh for ``marlforge worker-health``
(``workers.health``) and its rows in the registry of workers fresh (``workers.presence``).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from celery.signals import (
    task_postrun,
    task_prerun,
    worker_init,
    worker_ready,
    worker_shutting_down,
)

from core.dispatch.queue import CeleryDispatcher, make_celery
from core.settings import get_settings
from workers import health, presence
from workers.threads import THREAD_VARIABLES, limit_threads
from workers.watchdog import Watchdog, queue_lengths

log = logging.getLogger(__name__)

app = make_celery(get_settings())
app.conf.include = ["workers.tasks"]


@worker_init.connect  # type: ignore[untyped-decorator]  # celery has no type hints
def _limit_threads(**_: Any) -> None:
    # The solo pool runs every job in this process, so the variables reach its frameworks.
    threads = get_settings().worker_threads
    limit_threads(threads)
    effective = ", ".join(f"{name}={os.environ.get(name, 'unset')}" for name in THREAD_VARIABLES)
    log.info("framework CPU threads (MARLFORGE_WORKER_THREADS=%d): %s", threads, effective)


# The consumer watchdog (workers.watchdog): a worker idle while its queues hold messages is deaf.
_busy = threading.Event()
_watchdogs: list[Watchdog] = []


@task_prerun.connect  # type: ignore[untyped-decorator]
def _job_started(**_: Any) -> None:
    _busy.set()


@task_postrun.connect  # type: ignore[untyped-decorator]
def _job_ended(**_: Any) -> None:
    _busy.clear()


@worker_ready.connect  # type: ignore[untyped-decorator]
def _watch_consumer(sender: Any, **_: Any) -> None:
    settings = get_settings()
    queues = sorted(sender.app.amqp.queues.consume_from)
    waiting = queue_lengths(sender.app, queues)
    _watchdogs.append(
        Watchdog(
            waiting,
            _busy.is_set,
            settings.worker_deaf_after_s,
            min(5.0, settings.worker_deaf_after_s / 4),
        ).start()
    )
    log.info(
        "consumer watchdog on %s: stops this worker after %.0f s idle beside waiting messages",
        ", ".join(queues),
        settings.worker_deaf_after_s,
    )


@worker_shutting_down.connect  # type: ignore[untyped-decorator]
def _stop_watching(**_: Any) -> None:
    for watchdog in _watchdogs:
        watchdog.stop()


# The heartbeat behind ``marlforge worker-health`` (workers.health): its file is removed when the
# worker starts, so that one left by an earlier worker never vouches for this one, and rewritten
# from the moment the consumer is ready.
_heartbeats: list[health.Heartbeat] = []


@worker_init.connect  # type: ignore[untyped-decorator]
def _clear_heartbeat(**_: Any) -> None:
    health.clear(get_settings().worker_heartbeat_file)


@worker_ready.connect  # type: ignore[untyped-decorator]
def _start_heartbeat(sender: Any, **_: Any) -> None:
    settings = get_settings()
    check = health.consumer_check(sender, CeleryDispatcher(settings, sender.app))
    path, interval_s = settings.worker_heartbeat_file, settings.worker_heartbeat_interval_s
    _heartbeats.append(health.Heartbeat(path, interval_s, check).start())
    log.info("worker heartbeat: %s every %g s while the broker answers", path, interval_s)


@worker_shutting_down.connect  # type: ignore[untyped-decorator]
def _stop_heartbeat(**_: Any) -> None:
    for heartbeat in _heartbeats:
        heartbeat.stop()


# The registry of workers (workers.presence): this worker's rows, from the queues it consumes (in
# the order it reads them), written once its consumer is ready and deleted when it shuts down.
_presences: list[presence.Presence] = []


@worker_ready.connect  # type: ignore[untyped-decorator]
def _register(sender: Any, **_: Any) -> None:
    settings = get_settings()
    queues = list(sender.app.amqp.queues.consume_from)
    mine = presence.presence_for(settings, queues)
    _presences.append(mine.start())
    log.info(
        "registered as worker %s (%s)",
        presence.worker_id(),
        ", ".join(f"{row.backend}: {row.resource_class}" for row in mine.rows),
    )


@worker_shutting_down.connect  # type: ignore[untyped-decorator]
def _unregister(**_: Any) -> None:
    for mine in _presences:
        mine.stop()
