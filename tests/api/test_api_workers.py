"""``GET /v1/workers`` on the session's PostgreSQL (each test rolled back): the rows the registry
holds, written as a worker's heartbeat writes them (``WorkerRepository.put``), each with whether
it is live by the staleness limit; its filters; any key of any project reads the same list, no key
reads nothing; and nothing of a worker's settings is in it."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from core.db import utcnow
from core.enums import ResourceClass
from core.fleet.repository import WorkerRepository
from core.models import WorkerRecord
from core.settings import Settings
from learners.enums import Backend
from tests.auth_support import bearer

pytestmark = pytest.mark.integration

FIELDS = {
    "id", "hostname", "backend", "resource_class", "queues", "gpus", "suites", "started_at",
    "last_seen_at", "live",
}  # fmt: skip
H100 = "NVIDIA H100 80GB HBM3"


def _row(
    worker_id: str,
    backend: Backend,
    resource: ResourceClass,
    seen: dt.datetime,
    hostname: str = "cpu-host",
) -> WorkerRecord:
    gpu = resource == ResourceClass.GPU
    queues = [f"apitest.{backend}-gpu", f"apitest.{backend}"] if gpu else [f"apitest.{backend}"]
    return WorkerRecord(
        id=worker_id,
        backend=backend,
        hostname=hostname,
        queues=queues,
        resource_class=resource,
        gpus=[H100] if gpu else [],
        started_at=seen - dt.timedelta(minutes=10),
        last_seen_at=seen,
    )


@pytest.fixture
def registered(session: Session, settings: Settings) -> dict[str, dt.datetime]:
    """A live GPU worker of torch, a live CPU worker of torch and tensorflow (two rows), and a
    torch worker whose heartbeat stopped just past the staleness limit; when each was seen."""
    now = utcnow()
    seen = {
        "gpu-host-1": now - dt.timedelta(seconds=1),
        "cpu-host-7": now - dt.timedelta(seconds=2),
        "lost-host-3": now - dt.timedelta(seconds=settings.worker_heartbeat_stale_s + 5),
    }
    WorkerRepository(session).put(
        [
            _row("gpu-host-1", Backend.TORCH, ResourceClass.GPU, seen["gpu-host-1"], "gpu-host"),
            _row("cpu-host-7", Backend.TORCH, ResourceClass.CPU, seen["cpu-host-7"]),
            _row("cpu-host-7", Backend.TENSORFLOW, ResourceClass.CPU, seen["cpu-host-7"]),
            _row("lost-host-3", Backend.TORCH, ResourceClass.CPU, seen["lost-host-3"]),
        ]
    )
    session.commit()
    return seen


# The rows these tests register. The workers table is shared with the tests that run real
# workers on the same database (their committed rows come and go while these run), so each
# assertion reads only these rows.
MINE = frozenset({"gpu-host-1", "cpu-host-7", "lost-host-3"})


def _mine(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [w for w in items if w["id"] in MINE]


def _listed(client: TestClient, **params: str) -> list[tuple[str, str, str, bool]]:
    response = client.get("/v1/workers", params=params)
    assert response.status_code == 200, response.text
    return [
        (w["id"], w["backend"], w["resource_class"], w["live"])
        for w in _mine(response.json()["items"])
    ]


def test_no_key_or_a_bad_key_lists_nothing(
    anonymous: TestClient, registered: dict[str, dt.datetime]
) -> None:
    for headers in ({}, bearer("mfk_" + "x" * 43)):
        response = anonymous.get("/v1/workers", headers=headers)
        assert response.status_code == 401, response.text
        assert response.json()["error"]["code"] == "unauthenticated"
        assert "gpu-host" not in response.text


def test_every_row_with_whether_it_is_live(
    client: TestClient, registered: dict[str, dt.datetime], settings: Settings
) -> None:
    response = client.get("/v1/workers")

    assert response.status_code == 200, response.text
    body = response.json()
    body["items"] = _mine(body["items"])
    assert body["stale_after_s"] == settings.worker_heartbeat_stale_s
    assert [(w["id"], w["backend"], w["resource_class"], w["live"]) for w in body["items"]] == [
        ("cpu-host-7", "tensorflow", "cpu", True),
        ("cpu-host-7", "torch", "cpu", True),
        ("gpu-host-1", "torch", "gpu", True),
        ("lost-host-3", "torch", "cpu", False),
    ]
    gpu = body["items"][2]
    assert gpu["hostname"] == "gpu-host"
    assert gpu["queues"] == ["apitest.torch-gpu", "apitest.torch"]
    assert gpu["gpus"] == [H100]
    assert dt.datetime.fromisoformat(gpu["last_seen_at"]) == registered["gpu-host-1"]
    assert dt.datetime.fromisoformat(gpu["started_at"]) == registered["gpu-host-1"] - dt.timedelta(
        minutes=10
    )
    assert body["items"][0]["gpus"] == [] and body["items"][0]["queues"] == ["apitest.tensorflow"]


def test_filters_combine(client: TestClient, registered: dict[str, dt.datetime]) -> None:
    assert _listed(client, live="true") == [
        ("cpu-host-7", "tensorflow", "cpu", True),
        ("cpu-host-7", "torch", "cpu", True),
        ("gpu-host-1", "torch", "gpu", True),
    ]
    assert _listed(client, live="false") == [("lost-host-3", "torch", "cpu", False)]
    assert _listed(client, resource_class="gpu") == [("gpu-host-1", "torch", "gpu", True)]
    assert _listed(client, backend="tensorflow") == [("cpu-host-7", "tensorflow", "cpu", True)]
    assert _listed(client, backend="torch", resource_class="cpu", live="true") == [
        ("cpu-host-7", "torch", "cpu", True)
    ]
    assert _listed(client, backend="mindspore") == []
    assert _listed(client, backend="tensorflow", resource_class="gpu") == []


def test_a_bad_filter_is_422_naming_it(
    client: TestClient, registered: dict[str, dt.datetime]
) -> None:
    for params, field in (
        ({"backend": "jax"}, "backend"),
        ({"resource_class": "tpu"}, "resource_class"),
        ({"live": "maybe"}, "live"),
    ):
        response = client.get("/v1/workers", params=params)
        assert response.status_code == 422, response.text
        assert [f["field"] for f in response.json()["error"]["fields"]] == [field]


def test_any_role_of_any_project_reads_the_same_list(
    anonymous: TestClient, keys: dict[str, str], registered: dict[str, dt.datetime]
) -> None:
    # Workers serve every project: the list is no project's data.
    lists = [
        _mine(anonymous.get("/v1/workers", headers=bearer(keys[name])).json()["items"])
        for name in ("viewer", "member", "admin", "other", "other_admin")
    ]

    assert len(lists[0]) == 4
    assert all(listed == lists[0] for listed in lists)


def test_a_stale_worker_becomes_live_again_when_it_beats(
    client: TestClient, session: Session, registered: dict[str, dt.datetime]
) -> None:
    assert ("lost-host-3", "torch", "cpu", False) in _listed(client)

    WorkerRepository(session).touch("lost-host-3", utcnow())
    session.commit()

    assert ("lost-host-3", "torch", "cpu", True) in _listed(client, live="true")
    assert _listed(client, live="false") == []


def test_nothing_of_a_workers_settings_is_listed(
    client: TestClient, registered: dict[str, dt.datetime], settings: Settings
) -> None:
    response = client.get("/v1/workers")

    assert all(set(item) == FIELDS for item in response.json()["items"])
    assert set(response.json()) == {"items", "stale_after_s"}
    for secret in (settings.database_url, settings.broker_url, "postgresql", "redis://", "env"):
        assert secret not in response.text
    # The published model says the same: a client sees no field a secret could hide in.
    schema = client.get("/openapi.json").json()["components"]["schemas"]
    assert set(schema["RegisteredWorkerOut"]["properties"]) == FIELDS
