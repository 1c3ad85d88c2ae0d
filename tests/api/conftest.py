"""API tests: the app on the session's PostgreSQL database, each test inside a transaction that is
rolled back at the end (the service's own commits only release savepoints), and a real broker
transport (kombu's filesystem transport in the test's temporary folder)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from api.app import create_app
from core import auth
from core.auth.tokens import server_secret
from core.enums import Role
from core.settings import Settings
from core.storage import FilesystemStore
from tests.auth_support import bearer
from tests.broker_support import queued_messages as broker_messages

EXAMPLE_SPEC = Path(__file__).resolve().parents[2] / "examples" / "ddpg_pendulum.json"


@pytest.fixture
def example_spec() -> dict[str, Any]:
    """The README's example spec."""
    spec: dict[str, Any] = json.loads(EXAMPLE_SPEC.read_text())
    return spec


@pytest.fixture
def settings(tmp_path: Path, pg_url: str) -> Settings:
    """Settings for one test: its own var folder, embedded broker and artifacts."""
    return Settings(
        var_dir=tmp_path / "var",
        database_url=pg_url,
        broker_url="filesystem://",
        artifacts_dir=tmp_path / "artifacts",
        queue_prefix="apitest.",
    )


@pytest.fixture
def session_factory(rollback_sessions: sessionmaker[Session]) -> sessionmaker[Session]:
    """The app's sessions: joined to the test's rolled-back transaction."""
    return rollback_sessions


@pytest.fixture
def session(session_factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session for the test's own reads and writes (seen by the app: same transaction)."""
    with session_factory() as s:
        yield s


@pytest.fixture
def storage(settings: Settings) -> FilesystemStore:
    """The test's artifact storage."""
    return FilesystemStore(settings.artifacts_dir)


@pytest.fixture
def keys(settings: Settings, session: Session) -> dict[str, str]:
    """Keys of project ``team-a`` by role (``viewer``, ``member``, ``admin``) and a member and an
    admin key of project ``team-b`` (``other``, ``other_admin``), made in the test's transaction."""
    secret = server_secret(settings)
    team_a = auth.ensure_project(session, "team-a")
    made = {role.value: auth.create_key(session, secret, team_a, role, role.value) for role in Role}
    team_b = auth.ensure_project(session, "team-b")
    made["other"] = auth.create_key(session, secret, team_b, Role.MEMBER, "other team")
    made["other_admin"] = auth.create_key(session, secret, team_b, Role.ADMIN, "other admin")
    session.commit()
    return {name: created.token for name, created in made.items()}


@pytest.fixture
def anonymous(
    settings: Settings, session_factory: sessionmaker[Session], storage: FilesystemStore
) -> Iterator[TestClient]:
    """A client of the app wired to the test's transaction, broker folder and storage, with no
    key."""
    app = create_app(settings, session_factory=session_factory, storage=storage)
    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture
def member_client_with(
    settings: Settings,
    session_factory: sessionmaker[Session],
    storage: FilesystemStore,
    keys: dict[str, str],
) -> Iterator[Callable[..., TestClient]]:
    """Makes member clients of team-a on apps whose settings differ by the given fields (the
    quotas, say), wired to the test's transaction like ``client``."""
    contexts: list[TestClient] = []

    def make(**changes: Any) -> TestClient:
        app = create_app(
            settings.model_copy(update=changes), session_factory=session_factory, storage=storage
        )
        made = TestClient(app, headers=bearer(keys["member"]))
        contexts.append(made)
        return made.__enter__()

    yield make
    for made in contexts:
        made.__exit__(None, None, None)


@pytest.fixture
def client(anonymous: TestClient, keys: dict[str, str]) -> TestClient:
    """The same client, sending a ``member`` key of ``team-a`` on every request."""
    anonymous.headers.update(bearer(keys["member"]))
    return anonymous


@pytest.fixture
def queued_messages(settings: Settings) -> Callable[[], list[dict[str, Any]]]:
    """Reads the Celery messages waiting in the embedded broker's folder (queue, task, args)."""

    def read() -> list[dict[str, Any]]:
        return broker_messages(settings)

    return read
