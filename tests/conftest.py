"""Fixtures shared by the whole suite: a real PostgreSQL database and a real Redis per test session.

PostgreSQL: a fresh database (``marlforge_test_<random>``) is created on the server named by
``MARLFORGE_DATABASE_URL`` (default ``postgresql+psycopg://postgres@127.0.0.1:5432/test``), built
with ``alembic upgrade head`` and dropped at the end, so concurrent sessions never collide.
Redis: the server named by ``MARLFORGE_BROKER_URL`` (default ``redis://127.0.0.1:6379/0``); each
session uses its own queue names.

A test that needs either service skips when it is missing, except on CI (``CI=true``), where it
fails: CI must never pass by skipping its integration tests.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NoReturn

import pytest
from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from workers.threads import limit_threads

# One thread per framework op in every test process (each pytest-xdist worker) and the processes
# the tests start, as a worker has (``workers.threads``): two workers on two cores, each letting
# PyTorch, TensorFlow and MindSpore start a thread per core for every op, spin against each other
# (the same tests took 246 s with the frameworks' own pools and 162 s with one thread). Set before
# any test module imports a framework, which reads the caps once.
limit_threads(1)

if TYPE_CHECKING:
    from tests.s3_support import MotoServer

DEFAULT_DATABASE_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
ON_CI = os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The compose smoke run (tests/e2e/test_e2e_compose_smoke.py, about 10 minutes of image
    builds and a deployment) goes first, so a pytest-xdist worker starts it at once and the rest of
    the suite runs beside it instead of after it. Every worker collects the same order."""
    items.sort(key=lambda item: item.get_closest_marker("compose") is None)


def service_missing(what: str, reason: str) -> NoReturn:
    """Skip the test locally; fail it on CI."""
    message = f"{what} is not reachable: {reason}"
    if ON_CI:
        pytest.fail(f"{message} (CI=true: integration tests must run, not skip)", pytrace=False)
    pytest.skip(message)


def _postgres_base_url() -> str:
    url = os.environ.get("MARLFORGE_DATABASE_URL", "")
    return url if url.startswith("postgresql") else DEFAULT_DATABASE_URL


def _redis_base_url() -> str:
    url = os.environ.get("MARLFORGE_BROKER_URL", "")
    return url if url.startswith("redis") else DEFAULT_REDIS_URL


def create_postgres_database(prefix: str = "marlforge_test") -> tuple[str, Engine]:
    """A new empty database on the test server: its URL and an AUTOCOMMIT admin engine."""
    base = make_url(_postgres_base_url())
    admin = create_engine(
        base, isolation_level="AUTOCOMMIT", pool_pre_ping=True, connect_args={"connect_timeout": 5}
    )
    try:
        with admin.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:  # any failure to connect means the service is missing
        admin.dispose()
        service_missing("PostgreSQL", f"{base.render_as_string()}: {exc}")
    name = f"{prefix}_{secrets.token_hex(6)}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    return base.set(database=name).render_as_string(hide_password=False), admin


def drop_postgres_database(url: str, admin: Engine) -> None:
    """Drop a database made by ``create_postgres_database`` (closing leftover connections)."""
    name = make_url(url).database
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@contextlib.contextmanager
def migrated_database(prefix: str) -> Iterator[str]:
    """A new database on the test server, built by the migrations, dropped afterwards: for tests
    that must see no other test's rows."""
    from core import migrate

    url, admin = create_postgres_database(prefix)
    try:
        migrate.upgrade(url)
        yield url
    finally:
        drop_postgres_database(url, admin)


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """URL of this session's PostgreSQL database, migrated to the newest schema."""
    from core import migrate

    url, admin = create_postgres_database()
    try:
        migrate.upgrade(url)
        yield url
    finally:
        drop_postgres_database(url, admin)


@pytest.fixture
def fresh_postgres_url() -> Iterator[str]:
    """An empty PostgreSQL database (no schema) for one test, dropped afterwards."""
    url, admin = create_postgres_database("marlforge_fresh")
    try:
        yield url
    finally:
        drop_postgres_database(url, admin)


@pytest.fixture(scope="session")
def pg_engine(pg_url: str) -> Iterator[Engine]:
    """An engine on the session's database."""
    from core.db import make_engine

    engine = make_engine(pg_url)
    yield engine
    engine.dispose()


@pytest.fixture
def rollback_connection(pg_engine: Engine) -> Iterator[Connection]:
    """A connection inside an outer transaction that is rolled back after the test."""
    with pg_engine.connect() as conn:
        outer = conn.begin()
        try:
            yield conn
        finally:
            outer.rollback()


@pytest.fixture
def rollback_sessions(rollback_connection: Connection) -> sessionmaker[Session]:
    """Sessions joined to the test's transaction: their commits only release savepoints, and
    everything is rolled back after the test."""
    return sessionmaker(
        bind=rollback_connection, join_transaction_mode="create_savepoint", expire_on_commit=False
    )


@pytest.fixture(scope="session")
def redis_url() -> str:
    """URL of the Redis server the end-to-end tests use as their broker."""
    import redis

    url = _redis_base_url()
    try:
        redis.Redis.from_url(url, socket_connect_timeout=3).ping()
    except Exception as exc:  # any failure to ping means the service is missing
        service_missing("Redis", f"{url}: {exc}")
    return url


@pytest.fixture(scope="session")
def queue_prefix() -> str:
    """Queue names of this test session (``test-<random>.torch``...): other sessions sharing the
    Redis server never see its jobs."""
    return f"test-{secrets.token_hex(4)}."


@pytest.fixture(scope="session")
def tiny_spec() -> Callable[..., dict[str, Any]]:
    """Builds a DDPG Pendulum spec that trains in seconds (``total_steps``, top-level changes)."""

    def build(total_steps: int = 400, **changes: Any) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "name": "tiny-ddpg",
            "algorithm": "ddpg",
            "backend": "torch",
            "env": {"suite": "gymnasium", "id": "Pendulum-v1", "num_envs": 2},
            "total_steps": total_steps,
            "seed": 3,
            "hyperparameters": {
                "learning_starts": 64,
                "batch_size": 32,
                "hidden_sizes": [32, 32],
                "buffer_size": 10000,
            },
            "evaluation": {"every_steps": 200, "episodes": 1},
            "checkpoint": {"every_steps": 200, "keep_last": 2},
        }
        spec.update(changes)
        return spec

    return build


@pytest.fixture(scope="session")
def aws_env() -> Iterator[None]:
    """The AWS variables the S3 code under test reads (test credentials, no profile or instance
    metadata, few retries), set for the session and every process the tests start."""
    from tests.s3_support import AWS_ENV

    saved = {name: os.environ.get(name) for name in AWS_ENV}
    os.environ.update(AWS_ENV)
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="session")
def s3_server(aws_env: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    """moto's standalone S3 server, its own process on a free port, shared by the session."""
    from tests.s3_support import MotoServer

    server = MotoServer(tmp_path_factory.mktemp("moto"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_url(s3_server: MotoServer) -> str:
    """``s3://<a new bucket>/deploy``: an empty store for one test."""
    return f"s3://{s3_server.new_bucket()}/deploy"
