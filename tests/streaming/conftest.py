"""Streaming tests: the real API served by uvicorn on a port (SSE needs a real server), its own
PostgreSQL database with real commits, and a "run" driven by the worker's own code
(``DatabaseHooks``, ``core.lifecycle.transition``) from the test, so each test decides exactly when
each event is written."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker
from stream_support import Run, Server

from api.app import create_app
from api.event_bus import BusConfig, EventBus
from core.db import make_engine, make_session_factory
from core.dispatch.queue import CeleryDispatcher
from core.enums import ExperimentStatus
from core.experiments import service as experiments
from core.settings import Settings
from core.storage import FilesystemStore
from core.streaming import events_channel, redis_url_of
from learners.admission.parse import parse_spec
from tests.auth_support import bearer, default_project_id, new_key
from tests.conftest import migrated_database
from workers.runs.hooks import DatabaseHooks

S = ExperimentStatus


@pytest.fixture(scope="module")
def stream_db(pg_url: str) -> Iterator[str]:
    """A database of this module's own: streams see every commit, and no other test's rows."""
    with migrated_database("marlforge_stream") as url:
        yield url


@pytest.fixture(scope="module")
def engine(stream_db: str) -> Iterator[Engine]:
    """An engine on the module's database."""
    engine = make_engine(stream_db)
    yield engine
    engine.dispose()


@pytest.fixture
def sessions(engine: Engine) -> sessionmaker[Session]:
    """Sessions that really commit."""
    return make_session_factory(engine)


@pytest.fixture
def settings(tmp_path: Path, stream_db: str) -> Settings:
    """An embedded broker in the test's folder (jobs are queued, nobody consumes them)."""
    return Settings(
        var_dir=tmp_path / "var",
        database_url=stream_db,
        broker_url="filesystem://",
        artifacts_dir=tmp_path / "artifacts",
        queue_prefix="streamtest.",
    )


@pytest.fixture
def storage(settings: Settings) -> FilesystemStore:
    """The test's artifact storage."""
    return FilesystemStore(settings.artifacts_dir)


@pytest.fixture
def serve(
    settings: Settings, sessions: sessionmaker[Session], storage: FilesystemStore
) -> Iterator[Callable[..., Server]]:
    """Starts API servers (several may share the database); all are stopped after the test."""
    servers: list[Server] = []

    def start(bus: BusConfig | None = None, app_settings: Settings | None = None) -> Server:
        app_settings = app_settings or settings
        app = create_app(app_settings, session_factory=sessions, storage=storage)
        if bus is not None:
            app.state.event_bus = EventBus(
                sessions,
                bus,
                redis_url=redis_url_of(app_settings),
                channel=events_channel(app_settings),
            )
        servers.append(Server(app, bearer(new_key(sessions, app_settings))))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def start_run(
    settings: Settings,
    sessions: sessionmaker[Session],
    storage: FilesystemStore,
    tiny_spec: Callable[..., dict[str, Any]],
) -> Callable[..., Run]:
    """Submits a tiny spec (queued on the embedded broker) and returns its driver, which writes
    through ``writer`` sessions (the test's plain ones by default)."""
    dispatcher = CeleryDispatcher(settings)

    def start(writer: sessionmaker[Session] | None = None) -> Run:
        writer = writer or sessions
        with writer() as session:
            experiment = experiments.submit(
                session, dispatcher, parse_spec(tiny_spec()), default_project_id(session)
            )
        hooks = DatabaseHooks(
            experiment.id,
            writer,
            storage,
            keep_last=2,
            total_steps=400,
            poll_interval_s=3600,
            time_limit_s=600,
        )
        return Run(experiment.id, writer, hooks)

    return start
