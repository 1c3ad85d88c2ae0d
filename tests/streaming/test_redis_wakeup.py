"""With Redis as the broker, committing events publishes the experiment's id, and a stream is woken
by that message (not by a database poll: the poll is set to a minute here)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker
from stream_support import Run, Server, SseReader

from api.event_bus import BusConfig
from core.db import make_session_factory
from core.enums import EventKind, ExperimentStatus
from core.experiments.events import EventRepository
from core.settings import Settings
from core.streaming import events_channel, publish_after_commit, publisher_for

S = ExperimentStatus
pytestmark = pytest.mark.integration


@pytest.fixture
def redis_settings(tmp_path: Path, stream_db: str, redis_url: str) -> Settings:
    """Redis as the broker, under a channel of this test's own."""
    return Settings(
        var_dir=tmp_path / "var",
        database_url=stream_db,
        broker_url=redis_url,
        artifacts_dir=tmp_path / "artifacts",
        queue_prefix=f"streamtest-{secrets.token_hex(4)}.",
    )


@pytest.fixture
def publishing(engine: Engine, redis_settings: Settings) -> sessionmaker[Session]:
    """Sessions that announce their committed events on Redis (what the worker and API use)."""
    factory = make_session_factory(engine)
    publish_after_commit(factory, publisher_for(redis_settings))
    return factory


@pytest.fixture
def channel(redis_url: str, redis_settings: Settings) -> Iterator[redis.client.PubSub]:
    """A subscription to the deployment's event channel."""
    client = redis.Redis.from_url(redis_url)
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(events_channel(redis_settings))
    yield pubsub
    pubsub.close()
    client.close()


def _messages(pubsub: redis.client.PubSub, wait_s: float) -> list[str]:
    found, deadline = [], time.monotonic() + wait_s
    while time.monotonic() < deadline:
        message = pubsub.get_message(timeout=0.1)
        if message is not None:
            found.append(message["data"].decode())
    return found


def test_a_commit_publishes_its_experiments_and_a_rollback_nothing(
    start_run: Callable[..., Run],
    publishing: sessionmaker[Session],
    channel: redis.client.PubSub,
) -> None:
    run = start_run(publishing)
    assert _messages(channel, 1.0) == [run.id]  # the submit's ``queued`` event

    with publishing() as session:
        EventRepository(session).add(run.id, EventKind.LOG, {"message": "never committed"})
        session.flush()
        session.rollback()
    with publishing() as session:
        EventRepository(session).add(run.id, EventKind.LOG, {"message": "one"})
        EventRepository(session).add(run.id, EventKind.LOG, {"message": "two"})
        session.commit()

    assert _messages(channel, 1.0) == [run.id]  # one message per commit, none for the rollback


def test_a_stream_is_woken_by_redis(
    serve: Callable[..., Server],
    redis_settings: Settings,
    start_run: Callable[..., Run],
    publishing: sessionmaker[Session],
) -> None:
    slow_poll = BusConfig(fallback_poll_s=60.0, keepalive_s=60.0)
    server = serve(slow_poll, redis_settings)
    run = start_run(publishing)
    reader = SseReader(f"{server.url}/v1/experiments/{run.id}/events", server.headers, timeout=15)
    try:
        assert reader.next().event == "status"
        time.sleep(0.5)  # the stream is now waiting; only a message can wake it within 15 s
        run.move(S.QUEUED, S.RUNNING, None)
        run.report()
        run.move(S.RUNNING, S.SUCCEEDED, None)
        events = reader.until_end()
    finally:
        reader.close()
    assert [e.event for e in events][-2:] == ["status", "end"]
    assert "metrics" in [e.event for e in events]
