"""Reading metric series (checkpoint downloads: test_api_downloads.py)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from core.metrics.repository import MetricRepository, MetricWrite

pytestmark = pytest.mark.integration


@pytest.fixture
def experiment_id(client: TestClient, example_spec: dict[str, Any]) -> str:
    response = client.post("/v1/experiments", json=example_spec)
    assert response.status_code == 201
    value: str = response.json()["id"]
    return value


def _write_metrics(session: Session, experiment_id: str, steps: range, names: list[str]) -> None:
    points = [
        MetricWrite(step, name, float(step) + i / 10, 1_700_000_000.0 + step)
        for step in steps
        for i, name in enumerate(names)
    ]
    MetricRepository(session).write(experiment_id, points)
    session.commit()


def test_metrics_are_ordered_by_step_then_name(
    client: TestClient, session: Session, experiment_id: str
) -> None:
    _write_metrics(session, experiment_id, range(30, 0, -10), ["train/loss", "eval/return"])

    body = client.get(f"/v1/experiments/{experiment_id}/metrics").json()

    assert [(p["step"], p["name"]) for p in body["items"]] == [
        (s, n) for s in (10, 20, 30) for n in ("eval/return", "train/loss")
    ]
    assert body["items"][0] == {
        "step": 10,
        "wall_time": 1_700_000_010.0,
        "name": "eval/return",
        "value": 10.1,
    }
    assert body["next_after_step"] is None


def test_metric_pages_never_split_a_step(
    client: TestClient, session: Session, experiment_id: str
) -> None:
    _write_metrics(session, experiment_id, range(1, 8), ["a", "b", "c"])

    pages, after = [], None
    while True:
        params: dict[str, Any] = {"limit": 5}
        if after is not None:
            params["after_step"] = after
        body = client.get(f"/v1/experiments/{experiment_id}/metrics", params=params).json()
        pages.append([(p["step"], p["name"]) for p in body["items"]])
        after = body["next_after_step"]
        if after is None:
            break

    assert all(len(page) == 3 for page in pages[:-1])  # 5 points would split a step of 3
    flat = [point for page in pages for point in page]
    assert flat == [(s, n) for s in range(1, 8) for n in "abc"]


def test_metrics_filter_by_names_and_after_step(
    client: TestClient, session: Session, experiment_id: str
) -> None:
    _write_metrics(session, experiment_id, range(1, 6), ["a", "b", "c"])

    body = client.get(
        f"/v1/experiments/{experiment_id}/metrics", params={"names": "a,c", "after_step": 3}
    ).json()

    assert [(p["step"], p["name"]) for p in body["items"]] == [
        (4, "a"),
        (4, "c"),
        (5, "a"),
        (5, "c"),
    ]


def test_a_rewritten_point_replaces_the_old_one_and_nan_reads_as_null(
    client: TestClient, session: Session, experiment_id: str
) -> None:
    metrics = MetricRepository(session)
    metrics.write(experiment_id, [MetricWrite(5, "loss", 1.0, 1.0)])
    metrics.write(
        experiment_id, [MetricWrite(5, "loss", None, 2.0), MetricWrite(6, "loss", 3.0, 3.0)]
    )
    session.commit()

    items = client.get(f"/v1/experiments/{experiment_id}/metrics").json()["items"]

    assert [(p["step"], p["value"]) for p in items] == [(5, None), (6, 3.0)]


def test_metrics_of_an_unknown_experiment_are_404(client: TestClient) -> None:
    response = client.get("/v1/experiments/01JAAAAAAAAAAAAAAAAAAAAAAA/metrics")
    assert response.status_code == 404
