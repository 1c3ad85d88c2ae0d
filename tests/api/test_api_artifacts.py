"""Reading metric series and downloading checkpoint files."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from core.models import Checkpoint
from core.repositories import CheckpointRepository, MetricRepository, MetricWrite
from core.storage import FilesystemStore, checkpoint_key

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


def _store_checkpoint(
    session: Session, storage: FilesystemStore, experiment_id: str, step: int, data: bytes
) -> Checkpoint:
    stored = storage.put(checkpoint_key(experiment_id, step), lambda p: p.write_bytes(data))
    row = CheckpointRepository(session).record(
        experiment_id, step, stored.key, stored.size_bytes, stored.sha256
    )
    session.commit()
    return row


def test_checkpoints_are_listed_with_size_and_sha256(
    client: TestClient, session: Session, storage: FilesystemStore, experiment_id: str
) -> None:
    _store_checkpoint(session, storage, experiment_id, 200, b"second")
    _store_checkpoint(session, storage, experiment_id, 100, b"first!!")

    items = client.get(f"/v1/experiments/{experiment_id}/checkpoints").json()["items"]

    assert [(c["step"], c["size_bytes"]) for c in items] == [(100, 7), (200, 6)]
    assert items[1]["sha256"] == hashlib.sha256(b"second").hexdigest()
    assert set(items[0]) == {"id", "step", "size_bytes", "sha256", "created_at"}


def test_a_checkpoint_downloads_whole_with_length_and_etag(
    client: TestClient, session: Session, storage: FilesystemStore, experiment_id: str
) -> None:
    data = bytes(range(256)) * 1000
    row = _store_checkpoint(session, storage, experiment_id, 100, data)
    url = f"/v1/experiments/{experiment_id}/checkpoints/{row.id}/file"

    response = client.get(url)

    assert response.status_code == 200
    assert response.content == data
    assert response.headers["content-length"] == str(len(data))
    assert response.headers["etag"] == f'"{hashlib.sha256(data).hexdigest()}"'
    assert response.headers["accept-ranges"] == "bytes"
    head = client.head(url)
    assert head.status_code == 200 and head.headers["content-length"] == str(len(data))
    cached = client.get(url, headers={"if-none-match": response.headers["etag"]})
    assert cached.status_code == 304 and cached.content == b""


def test_a_checkpoint_serves_byte_ranges(
    client: TestClient, session: Session, storage: FilesystemStore, experiment_id: str
) -> None:
    data = b"0123456789abcdefghij"
    row = _store_checkpoint(session, storage, experiment_id, 100, data)
    url = f"/v1/experiments/{experiment_id}/checkpoints/{row.id}/file"

    partial = client.get(url, headers={"range": "bytes=5-9"})
    tail = client.get(url, headers={"range": "bytes=-4"})
    outside = client.get(url, headers={"range": "bytes=100-200"})
    malformed = client.get(url, headers={"range": "pages=1-2"})

    assert partial.status_code == 206 and partial.content == b"56789"
    assert partial.headers["content-range"] == "bytes 5-9/20"
    assert tail.status_code == 206 and tail.content == b"ghij"
    assert outside.status_code == 416
    assert outside.json()["error"]["code"] == "range_not_satisfiable"
    assert outside.headers["content-range"] == "bytes */20"
    assert malformed.status_code == 400 and malformed.json()["error"]["code"] == "invalid_range"


def test_missing_checkpoints_and_files_are_404(
    client: TestClient, session: Session, storage: FilesystemStore, experiment_id: str
) -> None:
    row = _store_checkpoint(session, storage, experiment_id, 100, b"data")
    Path(storage.resolve(row.path)).unlink()

    gone = client.get(f"/v1/experiments/{experiment_id}/checkpoints/{row.id}/file")
    unknown = client.get(
        f"/v1/experiments/{experiment_id}/checkpoints/01JAAAAAAAAAAAAAAAAAAAAAAA/file"
    )

    assert gone.status_code == 404 and gone.json()["error"]["code"] == "file_missing"
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"
