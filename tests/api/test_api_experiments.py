"""Submitting, listing, reading, cancelling and resuming experiments over HTTP."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from core.enums import ExperimentStatus
from core.leases import service as leases
from core.lifecycle import transition
from core.models import Experiment, StatusTransition
from learners.admission.parse import parse_spec

pytestmark = pytest.mark.integration

Messages = Callable[[], list[dict[str, Any]]]


def _submit(client: TestClient, spec: dict[str, Any], **changes: Any) -> dict[str, Any]:
    response = client.post("/v1/experiments", json={**spec, **changes})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def test_submit_stores_the_full_spec_and_queues_it_after_commit(
    client: TestClient, example_spec: dict[str, Any], session: Session, queued_messages: Messages
) -> None:
    response = client.post("/v1/experiments", json=example_spec)

    assert response.status_code == 201
    body = response.json()
    assert body["status"] == "queued"
    assert response.headers["location"] == f"/v1/experiments/{body['id']}"
    assert body["progress"] == {"step": 0, "total_steps": 6000, "fraction": 0.0}
    # The stored spec is the whole ExperimentSpec with every default filled in.
    assert body["spec"] == parse_spec(example_spec).model_dump(mode="json")
    assert body["spec"]["hyperparameters"]["gamma"] == 0.99
    row = session.get(Experiment, body["id"])
    assert row is not None and row.status == ExperimentStatus.QUEUED
    assert [m for m in queued_messages() if m["args"] == [body["id"]]] == [
        {
            "queue": "apitest.torch.gymnasium",
            "task": "marlforge.run_experiment",
            "args": [body["id"]],
        }
    ]
    timeline = session.scalars(
        select(StatusTransition).where(StatusTransition.experiment_id == body["id"])
    ).all()
    assert [(t.from_status, t.to_status) for t in timeline] == [(None, ExperimentStatus.QUEUED)]


def test_get_returns_what_was_submitted(client: TestClient, example_spec: dict[str, Any]) -> None:
    created = _submit(client, example_spec)

    response = client.get(f"/v1/experiments/{created['id']}")

    assert response.status_code == 200
    body = response.json()
    assert body == created
    assert set(body) >= {
        "spec",
        "status",
        "status_reason",
        "progress",
        "latest_metrics",
        "created_at",
        "updated_at",
        "started_at",
        "finished_at",
    }


def test_unknown_and_malformed_ids_are_404(client: TestClient) -> None:
    for path in ("/v1/experiments/01JAAAAAAAAAAAAAAAAAAAAAAA", "/v1/experiments/not-an-id"):
        response = client.get(path)
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"


def test_listing_pages_with_a_cursor_newest_first(
    client: TestClient, example_spec: dict[str, Any]
) -> None:
    ids = [_submit(client, example_spec, name=f"run-{i}")["id"] for i in range(5)]

    seen: list[str] = []
    after = None
    while True:
        params: dict[str, Any] = {"limit": 2}
        if after:
            params["after"] = after
        page = client.get("/v1/experiments", params=params).json()
        assert len(page["items"]) <= 2
        seen.extend(item["id"] for item in page["items"])
        after = page["next_after"]
        if after is None:
            break

    assert [i for i in seen if i in ids] == list(reversed(ids))
    assert len(seen) == len(set(seen))


def test_listing_filters_by_status_algorithm_and_backend(
    client: TestClient, example_spec: dict[str, Any]
) -> None:
    kept = _submit(client, example_spec)["id"]
    cancelled = _submit(client, example_spec)["id"]
    client.post(f"/v1/experiments/{cancelled}/cancel")

    def ids(**params: str) -> list[str]:
        response = client.get("/v1/experiments", params=params)
        assert response.status_code == 200, response.text
        return [item["id"] for item in response.json()["items"]]

    assert cancelled in ids(status="cancelled") and kept not in ids(status="cancelled")
    assert kept in ids(status="queued") and cancelled not in ids(status="queued")
    assert {kept, cancelled} <= set(ids(algorithm="ddpg", backend="torch"))
    assert ids(algorithm="mappo") == []
    assert ids(backend="tensorflow") == []


def test_listing_rejects_bad_filters_naming_the_field(client: TestClient) -> None:
    for params, field in (
        ({"status": "sleeping"}, "status"),
        ({"limit": "0"}, "limit"),
        ({"limit": "x"}, "limit"),
        ({"after": "nope"}, "after"),
        ({"backend": "jax"}, "backend"),
    ):
        response = client.get("/v1/experiments", params=params)
        assert response.status_code == 422, params
        assert [f["field"] for f in response.json()["error"]["fields"]] == [field]


def test_cancelling_a_queued_experiment_is_immediate_and_idempotent(
    client: TestClient, example_spec: dict[str, Any]
) -> None:
    created = _submit(client, example_spec)

    first = client.post(f"/v1/experiments/{created['id']}/cancel")
    again = client.post(f"/v1/experiments/{created['id']}/cancel")

    assert first.status_code == 200
    assert first.json()["status"] == "cancelled"
    member = client.get("/v1/whoami").json()["key"]["id"]
    reason = f"cancelled by key 'member' ({member}) before it started"
    assert first.json()["status_reason"] == reason
    assert first.json()["finished_at"] is not None
    assert again.status_code == 200 and again.json()["status"] == "cancelled"


def test_cancelling_a_running_experiment_asks_it_to_stop(
    client: TestClient, example_spec: dict[str, Any], session: Session
) -> None:
    created = _submit(client, example_spec)
    transition(session, created["id"], [ExperimentStatus.QUEUED], ExperimentStatus.RUNNING, None)
    session.commit()

    response = client.post(f"/v1/experiments/{created['id']}/cancel")

    assert response.status_code == 200
    assert response.json()["status"] == "cancelling"


def test_cancelling_a_finished_experiment_is_a_conflict(
    client: TestClient, example_spec: dict[str, Any], session: Session
) -> None:
    created = _submit(client, example_spec)
    transition(session, created["id"], [ExperimentStatus.QUEUED], ExperimentStatus.SUCCEEDED, None)
    session.commit()

    response = client.post(f"/v1/experiments/{created['id']}/cancel")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "conflict"
    assert client.get(f"/v1/experiments/{created['id']}").json()["status"] == "succeeded"


def test_resume_requeues_a_cancelled_experiment_with_the_same_id(
    client: TestClient, example_spec: dict[str, Any], queued_messages: Messages
) -> None:
    created = _submit(client, example_spec)
    client.post(f"/v1/experiments/{created['id']}/cancel")

    response = client.post(f"/v1/experiments/{created['id']}/resume")

    assert response.status_code == 200
    body = response.json()
    assert body["id"] == created["id"] and body["status"] == "queued"
    member = client.get("/v1/whoami").json()["key"]["id"]
    assert body["status_reason"] == (
        f"resumed by key 'member' ({member}) from the start (no checkpoint was saved)"
    )
    assert body["finished_at"] is None
    assert sum(m["args"] == [created["id"]] for m in queued_messages()) == 2


def test_resume_refuses_experiments_that_are_not_cancelled_or_failed(
    client: TestClient, example_spec: dict[str, Any]
) -> None:
    created = _submit(client, example_spec)

    response = client.post(f"/v1/experiments/{created['id']}/resume")

    assert response.status_code == 409
    assert "only cancelled or failed" in response.json()["error"]["message"]
    assert client.post("/v1/experiments/01JAAAAAAAAAAAAAAAAAAAAAAA/resume").status_code == 404


def test_a_spec_that_would_hurt_its_worker_is_refused_and_stores_nothing(
    client: TestClient, session: Session, queued_messages: Messages
) -> None:
    spec = {
        "name": "five thousand agents",
        "algorithm": "mappo",
        "backend": "torch",
        "env": {"suite": "mpe", "id": "simple_spread_v3", "num_envs": 4, "kwargs": {"N": 5000}},
        "total_steps": 100_000,
    }
    huge_buffer = {
        **spec,
        "algorithm": "maddpg",
        "env": {**spec["env"], "kwargs": {"N": 3, "continuous_actions": True}},
        "hyperparameters": {"buffer_size": 10_000_000},
    }

    crowded = client.post("/v1/experiments", json=spec)
    greedy = client.post("/v1/experiments", json=huge_buffer)

    assert crowded.status_code == 422
    assert crowded.json()["error"]["fields"] == [
        {"field": "env.kwargs.N", "reason": "at most 32 agents on simple_spread_v3 (got 5000)"}
    ]
    assert greedy.status_code == 422
    (problem,) = greedy.json()["error"]["fields"]
    assert problem["field"] == "hyperparameters.buffer_size"
    assert "MARLFORGE_RUN_MEMORY_MB" in problem["reason"]
    assert client.get("/v1/experiments").json()["items"] == []
    assert queued_messages() == []


def test_a_run_shows_its_queue_position_worker_lease_and_restarts(
    client: TestClient, example_spec: dict[str, Any], session: Session
) -> None:
    first = _submit(client, example_spec)
    second = _submit(client, example_spec, max_restarts=5)
    assert second["queue_position"] == first["queue_position"] + 1
    assert (second["restarts"], second["max_restarts"], second["worker"]) == (0, 5, None)
    listed = client.get("/v1/experiments").json()["items"]
    assert {item["queue_position"] for item in listed} == {None}

    now = dt.datetime.now(dt.UTC)
    transition(
        session, first["id"], [ExperimentStatus.QUEUED], ExperimentStatus.RUNNING, None,
        **leases.hold("gpu-3", 60.0, now),
    )  # fmt: skip
    session.commit()
    body = client.get(f"/v1/experiments/{first['id']}").json()
    assert body["queue_position"] is None
    assert client.get(f"/v1/experiments/{second['id']}").json()["queue_position"] == (
        second["queue_position"] - 1
    )
    assert body["worker"]["id"] == "gpu-3" and body["worker"]["lease"] == "held"

    # Silent for more than a quarter of its lease, then past it.
    for ago, lease in ((20, "silent"), (61, "lapsed")):
        beat = now - dt.timedelta(seconds=ago)
        transition(
            session, first["id"], [ExperimentStatus.RUNNING], ExperimentStatus.RUNNING, None,
            **leases.hold("gpu-3", 60.0, beat),
        )  # fmt: skip
        session.commit()
        assert client.get(f"/v1/experiments/{first['id']}").json()["worker"]["lease"] == lease
