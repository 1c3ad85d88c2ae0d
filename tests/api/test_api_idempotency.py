"""``Idempotency-Key`` on ``POST /v1/experiments`` (``core.idempotency``): a retry returns the
first request's experiment, a different body is a conflict, keys belong to a project and expire,
and two requests racing with one key create one run."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

import core.quotas
from api.app import create_app
from api.routes import experiments as experiment_routes
from core.db import make_engine, make_session_factory
from core.idempotency import service as idempotency
from core.models import Experiment, IdempotencyKey, Project
from core.settings import Settings
from core.storage import FilesystemStore
from tests.auth_support import bearer, new_key
from tests.broker_support import queued_messages as broker_messages
from tests.conftest import migrated_database

pytestmark = pytest.mark.integration

Messages = Callable[[], list[dict[str, Any]]]


def _post(client: TestClient, spec: dict[str, Any], key: str, **headers: str) -> Any:
    return client.post("/v1/experiments", json=spec, headers={"idempotency-key": key, **headers})


def _team_a(session: Session) -> str:
    project_id = session.scalar(select(Project.id).where(Project.name == "team-a"))
    assert project_id is not None
    return project_id


def _runs(session: Session, *projects: str) -> int:
    """Runs of the named projects (team-a by default): other test modules commit runs of their own
    to the same database. No names: every run (a database of the test's own)."""
    query = select(func.count()).select_from(Experiment).join(Project)
    names = projects or ("team-a",)
    return int(session.scalar(query.where(Project.name.in_(names))) or 0)


def _keys(session: Session) -> list[IdempotencyKey]:
    query = select(IdempotencyKey).where(IdempotencyKey.project_id == _team_a(session))
    return list(session.scalars(query))


def test_a_retry_with_the_same_key_and_body_returns_the_first_experiment(
    client: TestClient, example_spec: dict[str, Any], session: Session, queued_messages: Messages
) -> None:
    first = _post(client, example_spec, "retry-1")
    assert first.status_code == 201, first.text
    assert "idempotent-replayed" not in first.headers
    # The same body with its keys in another order is the same request (canonical JSON).
    reordered = dict(reversed(list(example_spec.items())))
    again = _post(client, reordered, "retry-1")

    assert again.status_code == 201
    assert again.headers["idempotent-replayed"] == "true"
    assert again.headers["location"] == first.headers["location"]
    assert again.json() == first.json()
    assert _runs(session) == 1
    assert [m["args"] for m in queued_messages()] == [[first.json()["id"]]]


def test_the_same_key_with_another_body_is_a_conflict(
    client: TestClient, example_spec: dict[str, Any], session: Session
) -> None:
    assert _post(client, example_spec, "k").status_code == 201
    other = _post(client, {**example_spec, "name": "something else"}, "k")

    assert other.status_code == 409
    assert other.json()["error"]["code"] == "idempotency_conflict"
    assert _runs(session) == 1


def test_keys_belong_to_a_project(
    client: TestClient, example_spec: dict[str, Any], keys: dict[str, str], session: Session
) -> None:
    ours = _post(client, example_spec, "shared-key").json()
    theirs = _post(client, example_spec, "shared-key", **bearer(keys["other"]))

    assert theirs.status_code == 201
    assert theirs.json()["id"] != ours["id"]
    assert "idempotent-replayed" not in theirs.headers
    assert _runs(session, "team-a", "team-b") == 2


def test_a_key_older_than_a_day_is_new_again_and_the_purge_forgets_it(
    client: TestClient, example_spec: dict[str, Any], session: Session
) -> None:
    first = _post(client, example_spec, "old").json()
    long_ago = dt.datetime.now(dt.UTC) - idempotency.TTL - dt.timedelta(minutes=1)
    ours = IdempotencyKey.project_id == _team_a(session)
    session.execute(update(IdempotencyKey).where(ours).values(created_at=long_ago))
    session.commit()

    again = _post(client, {**example_spec, "name": "changed"}, "old")
    assert again.status_code == 201
    assert again.json()["id"] != first["id"]
    # The purge forgets only keys past the TTL: the new one stays.
    _post(client, example_spec, "older")
    session.execute(
        update(IdempotencyKey).where(IdempotencyKey.key == "older").values(created_at=long_ago)
    )
    assert idempotency.purge(session) == 1
    assert {r.key for r in _keys(session)} == {"old"}


def test_a_bad_spec_with_a_key_stores_nothing_and_the_key_stays_free(
    client: TestClient, example_spec: dict[str, Any], session: Session
) -> None:
    bad = _post(client, {**example_spec, "total_steps": -1}, "fix-and-retry")
    assert bad.status_code == 422
    assert _keys(session) == []
    assert _post(client, example_spec, "fix-and-retry").status_code == 201


@pytest.mark.parametrize(
    ("key", "reason"),
    [("", "empty"), ("   ", "empty"), ("x" * 201, "longer than 200"), ("é-key", "printable")],
)
def test_a_bad_key_is_refused_naming_the_header(
    client: TestClient, example_spec: dict[str, Any], key: str, reason: str, session: Session
) -> None:
    response = client.post(
        "/v1/experiments",
        json=example_spec,
        headers=[(b"idempotency-key", key.encode("latin-1"))],
    )

    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_header"
    assert error["fields"][0]["field"] == "Idempotency-Key"
    assert reason in error["fields"][0]["reason"]
    assert _runs(session) == 0


def test_key_problem_refuses_control_characters() -> None:
    assert idempotency.key_problem("a\tb") is not None
    assert idempotency.key_problem("a\x7fb") is not None
    assert idempotency.key_problem("3f2c9a1e-7b7d-4e4b-9d6f-1f0e2a5b6c7d") is None


def test_two_concurrent_requests_with_one_key_create_one_run(
    tmp_path: Path, example_spec: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both requests pass the lookup before either inserts (a barrier holds them there), so the
    unique (project, key) decides: the loser answers with the winner's experiment."""
    with migrated_database("marlforge_idem") as url:
        settings = Settings(
            var_dir=tmp_path / "var",
            database_url=url,
            broker_url="filesystem://",
            artifacts_dir=tmp_path / "artifacts",
            queue_prefix="idemtest.",
        )
        engine = make_engine(url)
        sessions = make_session_factory(engine)
        token = new_key(sessions, settings)
        barrier = threading.Barrier(2, timeout=20)
        real_limits = core.quotas.check_project_limits

        def limits_after_both_looked_up(*args: Any) -> None:
            barrier.wait()
            real_limits(*args)

        monkeypatch.setattr(experiment_routes, "check_project_limits", limits_after_both_looked_up)
        app = create_app(settings, session_factory=sessions, storage=FilesystemStore(tmp_path))
        responses: list[Any] = []
        with TestClient(app, headers=bearer(token)) as client:
            threads = [
                threading.Thread(
                    target=lambda: responses.append(_post(client, example_spec, "race"))
                )
                for _ in range(2)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
        try:
            assert sorted(r.status_code for r in responses) == [201, 201]
            assert len({r.json()["id"] for r in responses}) == 1
            assert sum(r.headers.get("idempotent-replayed") == "true" for r in responses) == 1
            with sessions() as session:
                assert _runs(session, "default") == 1
            assert len(broker_messages(settings)) == 1
        finally:
            engine.dispose()
