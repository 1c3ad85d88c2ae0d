"""The Celery app the workers run: ``celery -A workers.app worker`` (or ``marlforge worker``).

Its configuration (queues, late acknowledgement, prefetch of one, visibility timeout) comes from
``core.queue`` so that the API, which only sends, and the workers agree on it.
"""

from __future__ import annotations

from core.queue import make_celery
from core.settings import get_settings

app = make_celery(get_settings())
app.conf.include = ["workers.tasks"]
