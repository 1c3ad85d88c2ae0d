"""Fan-out of experiment events to the streams of one API process.

Each stream reads its events from the database (``EventStreamRepository``); this bus decides when
to read and shares the reading. Per experiment with at least one open stream, the process keeps a
``_Topic``: the experiment's newest events (its tail) and its status as of the newest one. When the
experiment has news, the topic reads the new events once and wakes every stream of it, which then
take what they have not sent from the tail. A stream that is further behind than the tail reaches
(a reconnect long after, the whole history of a run) reads its own pages from the database until it
catches up.

News arrives in one of two ways:
- with Redis as the broker, a message on the deployment's channel (``core.streaming``), plus a slow
  database poll in case a message was lost;
- with the embedded defaults, a poll of the database every ``poll_interval_s``: one query for all of
  this process's open topics, however many streams read them.

A background task does the listening while at least one stream is open, and stops with the last.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass
from typing import TypeVar

from anyio import to_thread
from fastapi import FastAPI, Request
from sqlalchemy.orm import Session, sessionmaker

from core.enums import EventKind, ExperimentStatus
from core.experiments.event_stream import EventStreamRepository, StoredEvent
from core.settings import Settings
from core.streaming import events_channel, publish_after_commit, publisher_for, redis_url_of

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class BusConfig:
    """Timings and sizes of the bus."""

    keepalive_s: float = 15.0
    """A stream with nothing to send writes an SSE comment this often (proxies close idle ones)."""
    recheck_s: float = 5.0
    """A stream checks this often that the key or session it was opened with is still live, and
    ends once it was revoked, signed out or expired."""
    poll_interval_s: float = 0.25
    """Embedded defaults: how often the database is asked which open experiments have news."""
    fallback_poll_s: float = 2.0
    """Redis: the same question, as a safety net for a lost message."""
    tail_events: int = 2000
    """Events each topic keeps in memory; a stream further behind reads the database."""
    page_size: int = 500
    """Events a stream sends per write."""


@dataclass(frozen=True)
class Page:
    """What a stream sends next."""

    events: list[StoredEvent]
    cursor: int
    """Continue after this event id."""
    more: bool
    """More events are already known: read again at once."""
    status: str | None
    """When not ``more``: the experiment's status as of ``cursor``."""
    gone: bool = False
    """The experiment does not exist (any more)."""

    @property
    def finished(self) -> bool:
        """The stream has sent everything and the run is over."""
        if self.more:
            return False
        return self.gone or (self.status is not None and ExperimentStatus(self.status).is_terminal)


class _Topic:
    """One experiment's tail in this process: every event with an id in (floor, high]."""

    def __init__(self, experiment_id: str) -> None:
        self.experiment_id = experiment_id
        self.waiters: set[asyncio.Event] = set()
        self.lock = asyncio.Lock()
        self.stale = True
        self.loaded = False
        self.gone = False
        self.floor = 0
        self.high = 0
        self.status: str | None = None
        self.events: list[StoredEvent] = []
        self.ids: list[int] = []

    def wake(self) -> None:
        self.stale = True
        for waiter in self.waiters:
            waiter.set()

    def append(self, events: list[StoredEvent], capacity: int) -> None:
        for event in events:
            if event.kind == EventKind.STATUS:
                self.status = event.payload.get("to")
        self.events.extend(events)
        self.ids.extend(e.id for e in events)
        self.high = events[-1].id
        if len(self.events) > 2 * capacity:
            self.floor = self.ids[-capacity - 1]
            del self.events[:-capacity], self.ids[:-capacity]


class Subscription:
    """One stream's view of the bus."""

    def __init__(self, bus: EventBus, topic: _Topic, waiter: asyncio.Event) -> None:
        self._bus, self._topic, self._waiter = bus, topic, waiter

    async def next_page(self, after_id: int, kinds: Collection[EventKind] = ()) -> Page:
        """The events after ``after_id`` (only ``kinds`` if given) that are committed now."""
        # Cleared before reading: news that arrives during the read makes the next wait return.
        self._waiter.clear()
        return await self._bus.read(self._topic, after_id, kinds)

    async def wait(self, timeout_s: float) -> bool:
        """Wait for news; False when ``timeout_s`` passed without any."""
        try:
            async with asyncio.timeout(timeout_s):
                await self._waiter.wait()
        except TimeoutError:
            # A quiet period also re-reads the database once: the cheapest guard against a
            # notification that never came.
            self._topic.stale = True
            return False
        return True


class EventBus:
    """The streams of one process, woken by Redis messages or by polling the database."""

    def __init__(
        self,
        session_factory: sessionmaker[Session],
        config: BusConfig | None = None,
        *,
        redis_url: str | None = None,
        channel: str = "marlforge.events",
    ) -> None:
        self.session_factory = session_factory
        self.config = config or BusConfig()
        self.redis_url = redis_url
        self.channel = channel
        self._topics: dict[str, _Topic] = {}
        self._watcher: asyncio.Task[None] | None = None

    @contextlib.asynccontextmanager
    async def subscribe(self, experiment_id: str) -> AsyncIterator[Subscription]:
        """A subscription to the experiment's events for the duration of the block."""
        topic = self._topics.setdefault(experiment_id, _Topic(experiment_id))
        waiter = asyncio.Event()
        topic.waiters.add(waiter)
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.create_task(self._watch(), name="event-bus-watcher")
        try:
            yield Subscription(self, topic, waiter)
        finally:
            topic.waiters.discard(waiter)
            if not topic.waiters and self._topics.get(experiment_id) is topic:
                del self._topics[experiment_id]
            if not self._topics and self._watcher is not None:
                self._watcher.cancel()
                self._watcher = None

    async def query(self, work: Callable[[EventStreamRepository], T]) -> T:
        """Run ``work`` on a fresh session in a worker thread (the database driver blocks)."""

        def run() -> T:
            with self.session_factory() as session:
                return work(EventStreamRepository(session))

        return await to_thread.run_sync(run)

    async def read(self, topic: _Topic, after_id: int, kinds: Collection[EventKind]) -> Page:
        """The page a stream of ``topic`` that has sent everything up to ``after_id`` sends next."""
        async with topic.lock:
            if topic.stale:
                topic.stale = False
                try:
                    await self._refresh(topic)
                except BaseException:
                    topic.stale = True
                    raise
        if topic.gone:
            return Page([], after_id, more=False, status=None, gone=True)
        if after_id < topic.floor:
            return await self._read_behind(topic, after_id, kinds)
        start = bisect.bisect_right(topic.ids, after_id)
        wanted = [e for e in topic.events[start:] if not kinds or e.kind in kinds]
        size = self.config.page_size
        if len(wanted) > size:
            return Page(wanted[:size], wanted[size - 1].id, more=True, status=None)
        return Page(wanted, max(after_id, topic.high), more=False, status=topic.status)

    async def _read_behind(
        self, topic: _Topic, after_id: int, kinds: Collection[EventKind]
    ) -> Page:
        size, floor = self.config.page_size, topic.floor
        events = await self.query(lambda r: r.after(topic.experiment_id, after_id, size, kinds))
        if len(events) == size:
            return Page(events, events[-1].id, more=True, status=None)
        # Everything up to the floor was committed before this read began: continue from the tail.
        cursor = max(events[-1].id if events else after_id, floor)
        return Page(events, cursor, more=True, status=None)

    async def _refresh(self, topic: _Topic) -> None:
        experiment_id = topic.experiment_id
        if not topic.loaded:
            head = await self.query(lambda r: r.head(experiment_id))
            topic.loaded = True
            if head is None:
                topic.gone = True
                return
            topic.floor = topic.high = head.last_id
            topic.status = head.status
            return
        batch = 1000
        while True:
            events = await self.query(
                lambda r, high=topic.high: r.after(experiment_id, high, batch)  # type: ignore[misc]
            )
            if events:
                topic.append(events, self.config.tail_events)
            if len(events) < batch:
                return

    # --- news ------------------------------------------------------------------------------

    async def _watch(self) -> None:
        if self.redis_url is None:
            await self._poll(self.config.poll_interval_s)
            return
        async with asyncio.TaskGroup() as group:
            group.create_task(self._listen_redis(self.redis_url))
            group.create_task(self._poll(self.config.fallback_poll_s))

    async def _poll(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            ids = list(self._topics)
            if not ids:
                continue
            try:
                latest = await self.query(lambda r, ids=ids: r.latest_ids(ids))  # type: ignore[misc]
            except Exception:  # a database hiccup only delays the streams; try again next time
                log.warning("could not poll the event log", exc_info=True)
                continue
            for experiment_id, last_id in latest.items():
                topic = self._topics.get(experiment_id)
                if topic is not None and topic.loaded and last_id > topic.high:
                    topic.wake()

    async def _listen_redis(self, url: str) -> None:
        import redis.asyncio as aioredis

        while True:
            client = aioredis.Redis.from_url(url, socket_connect_timeout=3)
            try:
                async with client.pubsub() as pubsub:
                    await pubsub.subscribe(self.channel)
                    # Messages sent before the subscription took hold are lost: re-read once.
                    for open_topic in list(self._topics.values()):
                        open_topic.wake()
                    async for message in pubsub.listen():
                        if message.get("type") == "message":
                            topic = self._topics.get(message["data"].decode())
                            if topic is not None:
                                topic.wake()
            except Exception as exc:  # redis raises several types; the poll covers the outage
                log.warning("event notifications from Redis interrupted (%s); retrying", exc)
                await asyncio.sleep(1.0)
            finally:
                await client.aclose()


def install_event_bus(app: FastAPI, settings: Settings, config: BusConfig | None = None) -> None:
    """Give ``app`` its event bus, and make its own commits announce their events."""
    services = app.state.services
    redis_url = redis_url_of(settings)
    app.state.event_bus = EventBus(
        services.session_factory, config, redis_url=redis_url, channel=events_channel(settings)
    )
    publish_after_commit(services.session_factory, publisher_for(settings))


def get_event_bus(request: Request) -> EventBus:
    """The app's event bus."""
    bus: EventBus = request.app.state.event_bus
    return bus
