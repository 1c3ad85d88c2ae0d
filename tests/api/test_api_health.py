"""Liveness and readiness, including a broker and a database that are down."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.app import create_app
from core.db import make_engine, make_session_factory
from core.enums import ExperimentStatus
from core.models import Experiment
from core.settings import Settings
from core.storage import ArtifactStore, FilesystemStore
from core.storage.s3 import S3Store
from tests.auth_support import bearer
from tests.s3_support import MotoServer, free_port

pytestmark = pytest.mark.integration

# Nothing listens on port 1: connections are refused at once.
DEAD_REDIS = "redis://127.0.0.1:1/0"


def test_healthz_and_readyz_are_ok(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok", "checks": {}}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {
        "status": "ok",
        "checks": {"database": "ok", "broker": "ok", "artifacts": "ok"},
    }


def test_readyz_is_503_when_the_broker_is_down(
    settings: Settings, session_factory: Any, storage: FilesystemStore, keys: dict[str, str]
) -> None:
    app = create_app(
        settings.model_copy(update={"broker_url": "redis://:s3cr3t@127.0.0.1:1/0"}),
        session_factory=session_factory,
        storage=storage,
    )
    with TestClient(app) as client:
        anonymous = client.get("/readyz")
        member = client.get("/readyz", headers=bearer(keys["member"]))
        admin = client.get("/readyz", headers=bearer(keys["admin"]))

    # Status words only, without an admin key: no host, no reason, no credential.
    for answer in (anonymous, member):
        assert answer.status_code == 503
        assert answer.json() == {
            "status": "unavailable",
            "checks": {"database": "ok", "broker": "unavailable", "artifacts": "ok"},
        }
    assert admin.status_code == 503
    checks = admin.json()["checks"]
    assert checks["database"] == "ok" and checks["broker"].startswith("broker unreachable")
    assert "s3cr3t" not in admin.text


def test_readyz_is_503_when_the_database_is_down(tmp_path: Path, settings: Settings) -> None:
    engine = make_engine("postgresql+psycopg://postgres@127.0.0.1:1/none?connect_timeout=2")
    app = create_app(
        settings, session_factory=make_session_factory(engine), storage=FilesystemStore(tmp_path)
    )
    with TestClient(app) as client:
        response = client.get("/readyz")
    engine.dispose()

    # No key can be checked without the database: the status word only, for anyone.
    assert response.status_code == 503
    assert response.json()["checks"]["database"] == "unavailable"


def test_a_submission_the_broker_cannot_take_is_503_and_marked_failed(
    settings: Settings,
    session_factory: Any,
    storage: FilesystemStore,
    session: Session,
    example_spec: dict[str, Any],
    keys: dict[str, str],
) -> None:
    app = create_app(
        settings.model_copy(update={"broker_url": DEAD_REDIS}),
        session_factory=session_factory,
        storage=storage,
    )
    with TestClient(app) as client:
        response = client.post("/v1/experiments", json=example_spec, headers=bearer(keys["member"]))

    assert response.status_code == 503
    assert response.json()["error"]["code"] == "broker_unavailable"
    # The row is complete and honest: failed with the reason, and resumable later.
    row = session.scalars(select(Experiment).order_by(Experiment.id.desc())).first()
    assert row is not None and row.status == ExperimentStatus.FAILED
    assert row.status_reason is not None and "broker is unreachable" in row.status_reason


def _readyz_with(
    settings: Settings, session_factory: Any, storage: ArtifactStore, admin_key: str
) -> Any:
    app = create_app(settings, session_factory=session_factory, storage=storage)
    with TestClient(app) as client:
        return client.get("/readyz", headers=bearer(admin_key))


def test_readyz_is_503_naming_the_artifact_store_when_it_cannot_be_used(
    tmp_path: Path,
    settings: Settings,
    session_factory: Any,
    s3_server: MotoServer,
    keys: dict[str, str],
) -> None:
    (tmp_path / "a-file").write_bytes(b"")
    not_a_directory = FilesystemStore(tmp_path / "a-file")
    no_bucket = S3Store(
        "s3://no-such-bucket/marlforge", endpoint_url=s3_server.endpoint, cache_dir=tmp_path
    )
    no_server = S3Store(
        "s3://models/marlforge", endpoint_url=f"http://127.0.0.1:{free_port()}", cache_dir=tmp_path
    )

    answers = [
        _readyz_with(settings, session_factory, s, keys["admin"])
        for s in (not_a_directory, no_bucket, no_server)
    ]

    assert [a.status_code for a in answers] == [503, 503, 503]
    checks = [a.json()["checks"] for a in answers]
    assert all(c["database"] == "ok" and c["broker"] == "ok" for c in checks)
    assert checks[0]["artifacts"].startswith(f"{not_a_directory.url} cannot be created")
    assert checks[1]["artifacts"] == (
        f"bucket 'no-such-bucket' does not exist at {s3_server.endpoint}"
    )
    assert checks[2]["artifacts"].startswith(
        "s3://models/marlforge unreachable at http://127.0.0.1:"
    )
