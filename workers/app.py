"""The Celery app the workers run: ``celery -A workers.app worker`` (or ``marlforge worker``).

Its configuration (queues, late acknowledgement, prefetch of one, visibility timeout) comes from
``core.queue`` so that the API, which only sends, and the workers agree on it. When a worker starts
it caps the frameworks' CPU threads (``workers.threads``), before any job imports one.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from celery.signals import worker_init

from core.queue import make_celery
from core.settings import get_settings
from workers.threads import THREAD_VARIABLES, limit_threads

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
