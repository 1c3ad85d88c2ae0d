"""Engines and sessions. SQLite (the laptop default) and PostgreSQL (deployments) both work.

The schema is built by Alembic (``marlforge migrate``); nothing here creates tables.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import DateTime, Engine, create_engine, event
from sqlalchemy.engine import Dialect, make_url
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.types import TypeDecorator

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_DELAYS_S = (0.25, 0.5, 1.0, 2.0, 4.0)
"""The waits between the attempts of ``retry_transient`` (about 8 s in all)."""


def is_transient(exc: BaseException) -> bool:
    """True for a lost database connection (the server restarted, the connection was terminated,
    a failover): the same transaction may succeed on a new connection."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    return isinstance(exc, OperationalError)


def retry_transient(operation: Callable[[], T], what: str) -> T:
    """Run ``operation`` (one whole transaction, in a session of its own) again when the database
    connection was lost in it; the error of the last attempt propagates. A transaction that died
    before its commit left nothing behind, so running it again writes it once."""
    for delay in (*RETRY_DELAYS_S, None):
        try:
            return operation()
        except DBAPIError as exc:
            if delay is None or not is_transient(exc):
                raise
            log.warning("%s: the database connection was lost (%s); again in %.2f s",
                        what, type(exc.orig).__name__, delay)  # fmt: skip
            time.sleep(delay)
    raise AssertionError("unreachable")


def utcnow() -> dt.datetime:
    """The current time, timezone-aware in UTC: every timestamp the service stores."""
    return dt.datetime.now(dt.UTC)


class UTCDateTime(TypeDecorator[dt.datetime]):
    """A timezone-aware UTC timestamp on every database (SQLite returns naive values otherwise)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("timestamps must be timezone-aware")
        return value.astimezone(dt.UTC)

    def process_result_value(
        self, value: dt.datetime | None, dialect: Dialect
    ) -> dt.datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets the API read while the worker writes; the busy timeout makes a writer wait for the
    # other process's transaction instead of failing with "database is locked".
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def make_engine(url: str) -> Engine:
    """An engine for ``url``; a SQLite file's folder is created and its connections configured."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            from pathlib import Path

            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True)


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions that keep loaded values after commit (responses are built after the commit)."""
    return sessionmaker(bind=engine, expire_on_commit=False)
