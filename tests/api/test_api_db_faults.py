"""The API's database connections cut (``pg_terminate_backend`` from another connection): an idle
pooled connection is replaced unnoticed, and one cut in the middle of a request's transaction
gives a 503 ``database_unavailable`` with ``Retry-After``, never a 500; the next request works."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, create_engine, event, text

from api.app import create_app
from core.db import make_engine, make_session_factory
from core.settings import Settings
from tests.auth_support import bearer, new_key

pytestmark = pytest.mark.integration


@pytest.fixture
def engine(pg_url: str) -> Iterator[Engine]:
    """The app's own engine on the session's database (real commits, a real pool)."""
    made = make_engine(pg_url)
    yield made
    made.dispose()


@pytest.fixture
def admin(pg_url: str) -> Iterator[Engine]:
    made = create_engine(pg_url, isolation_level="AUTOCOMMIT")
    yield made
    made.dispose()


@pytest.fixture
def client(tmp_path: Path, pg_url: str, engine: Engine) -> Iterator[TestClient]:
    settings = Settings(var_dir=tmp_path / "var", database_url=pg_url, queue_prefix="dbfault.")
    sessions = make_session_factory(engine)
    app = create_app(settings, session_factory=sessions)
    with TestClient(app, headers=bearer(new_key(sessions, settings))) as test_client:
        yield test_client


def _terminate(admin: Engine, pid: int) -> None:
    with admin.connect() as connection:
        assert connection.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar()


def test_a_pooled_connection_cut_while_idle_is_replaced(
    client: TestClient, engine: Engine, admin: Engine
) -> None:
    assert client.get("/v1/experiments").status_code == 200
    with engine.connect() as connection:
        pid = connection.execute(text("SELECT pg_backend_pid()")).scalar_one()
    _terminate(admin, pid)  # the pool now holds a dead connection

    assert client.get("/v1/experiments").status_code == 200


def test_a_connection_cut_mid_request_is_a_503_and_the_next_request_works(
    client: TestClient, engine: Engine, admin: Engine
) -> None:
    cut: list[int] = []

    @event.listens_for(engine, "before_cursor_execute")
    def cut_once(connection: Any, cursor: Any, statement: str, *_: Any) -> None:
        # Inside the listing's transaction, after authentication: the experiments query.
        if not cut and "FROM experiments" in statement:
            pid = connection.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
            cut.append(pid)
            _terminate(admin, pid)

    response = client.get("/v1/experiments")
    event.remove(engine, "before_cursor_execute", cut_once)

    assert cut, "no connection was cut"
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "database_unavailable"
    assert response.headers["retry-after"] == "1"
    assert client.get("/v1/experiments").status_code == 200
