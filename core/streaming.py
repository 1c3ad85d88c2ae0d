"""Telling event streams that an experiment has new events, the moment they are committed.

The database is the source of truth of every stream: a stream reads its events from
``experiment_events`` and nothing else. This module only shortens the wait. With Redis as the
broker, every process that commits events (the API, the workers) publishes the experiment's id on
one Redis channel after the commit, and every API process serving streams is subscribed to it.
With the embedded defaults there is no Redis; the API polls the database instead
(``api.event_bus``).

Publishing is best effort: a lost message only delays a stream until its next database poll.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any, Protocol

from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

from core.models import ExperimentEvent
from core.settings import Settings

log = logging.getLogger(__name__)

_PENDING_KEY = "marlforge.events_pending"
# After a failed publish, stay quiet this long: a Redis outage must not flood the logs.
_WARN_EVERY_S = 60.0


def events_channel(settings: Settings) -> str:
    """The Redis channel of this deployment's event notifications (the queue prefix keeps
    deployments and test sessions sharing one Redis apart)."""
    return f"{settings.queue_prefix}events"


def redis_url_of(settings: Settings) -> str | None:
    """The broker's URL when the broker is Redis, else None."""
    url = settings.broker_url
    return url if url.startswith(("redis://", "rediss://", "unix://")) else None


class EventPublisher(Protocol):
    """Announces that experiments have new committed events."""

    def publish(self, experiment_ids: Iterable[str]) -> None:
        """Announce each id; never raises."""


class RedisEventPublisher:
    """Publishes experiment ids on the deployment's Redis channel."""

    def __init__(self, url: str, channel: str) -> None:
        import redis

        self.channel = channel
        self._client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        self._quiet_until = 0.0

    def publish(self, experiment_ids: Iterable[str]) -> None:
        try:
            for experiment_id in experiment_ids:
                self._client.publish(self.channel, experiment_id)
        except Exception as exc:  # redis raises several types; all only delay the streams
            now = time.monotonic()
            if now >= self._quiet_until:
                self._quiet_until = now + _WARN_EVERY_S
                log.warning(
                    "could not publish event notifications (streams fall back to "
                    "polling the database): %s",
                    exc,
                )


def publisher_for(settings: Settings) -> EventPublisher | None:
    """The publisher these settings call for: Redis when the broker is Redis, else none."""
    url = redis_url_of(settings)
    return RedisEventPublisher(url, events_channel(settings)) if url is not None else None


def _collect(session: Session, _flush_context: Any) -> None:
    pending: set[str] = session.info.setdefault(_PENDING_KEY, set())
    pending.update(o.experiment_id for o in session.new if isinstance(o, ExperimentEvent))


def _forget(session: Session, _previous_transaction: Any = None) -> None:
    session.info.pop(_PENDING_KEY, None)


def publish_after_commit(
    session_factory: sessionmaker[Session], publisher: EventPublisher | None
) -> None:
    """Make every session of ``session_factory`` announce the experiments whose events it commits.

    The announcement goes out after the commit, so a woken stream always finds the events.
    """
    if publisher is None:
        return

    def _publish(session: Session) -> None:
        pending = session.info.pop(_PENDING_KEY, None)
        if pending:
            publisher.publish(sorted(pending))

    event.listen(session_factory, "after_flush", _collect)
    event.listen(session_factory, "after_commit", _publish)
    event.listen(session_factory, "after_rollback", _forget)
