"""Listing and downloading checkpoint files, the same from a directory and from an S3 bucket (moto's
server, its own process): streamed whole with length and ETag, byte ranges, 304, and a clear error
for a missing, corrupt or unreachable object."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from api.app import create_app
from core.experiments.checkpoints import CheckpointRepository
from core.models import Checkpoint
from core.settings import Settings
from core.storage import ArtifactStore, FilesystemStore, ObjectCorrupt, checkpoint_key
from core.storage.s3 import S3Store
from tests.auth_support import bearer
from tests.s3_support import MotoServer, free_port

pytestmark = pytest.mark.integration


@pytest.fixture(params=["filesystem", "s3"])
def storage(request: pytest.FixtureRequest, settings: Settings, tmp_path: Path) -> ArtifactStore:
    """The app's store (``client`` is built on it): a directory, then a bucket."""
    if request.param == "filesystem":
        return FilesystemStore(settings.artifacts_dir)
    server: MotoServer = request.getfixturevalue("s3_server")
    url: str = request.getfixturevalue("s3_url")
    return S3Store(url, endpoint_url=server.endpoint, cache_dir=tmp_path / "cache")


@pytest.fixture
def experiment_id(client: TestClient, example_spec: dict[str, Any]) -> str:
    response = client.post("/v1/experiments", json=example_spec)
    assert response.status_code == 201
    value: str = response.json()["id"]
    return value


def _store_checkpoint(
    session: Session,
    storage: ArtifactStore,
    experiment_id: str,
    step: int,
    data: bytes,
    eval_return: float | None = None,
) -> Checkpoint:
    stored = storage.put(checkpoint_key(experiment_id, step), lambda p: p.write_bytes(data))
    row = CheckpointRepository(session).record(
        experiment_id, step, stored.key, stored.size_bytes, stored.sha256, eval_return
    )
    session.commit()
    return row


def _url(experiment_id: str, row: Checkpoint) -> str:
    return f"/v1/experiments/{experiment_id}/checkpoints/{row.id}/file"


def test_checkpoints_are_listed_with_size_and_sha256(
    client: TestClient, session: Session, storage: ArtifactStore, experiment_id: str
) -> None:
    _store_checkpoint(session, storage, experiment_id, 200, b"second")
    _store_checkpoint(session, storage, experiment_id, 100, b"first!!")

    items = client.get(f"/v1/experiments/{experiment_id}/checkpoints").json()["items"]

    assert [(c["step"], c["size_bytes"]) for c in items] == [(100, 7), (200, 6)]
    assert items[1]["sha256"] == hashlib.sha256(b"second").hexdigest()
    assert set(items[0]) == {
        "id", "step", "size_bytes", "sha256", "created_at", "eval_return", "best",
    }  # fmt: skip


def test_the_best_checkpoint_is_marked_and_downloads_as_best(
    client: TestClient, session: Session, storage: ArtifactStore, experiment_id: str
) -> None:
    best_url = f"/v1/experiments/{experiment_id}/checkpoints/best/file"
    _store_checkpoint(session, storage, experiment_id, 100, b"no eval")
    assert client.get(best_url).status_code == 404

    _store_checkpoint(session, storage, experiment_id, 200, b"peak", eval_return=-12.5)
    _store_checkpoint(session, storage, experiment_id, 300, b"drifted", eval_return=-40.0)
    _store_checkpoint(session, storage, experiment_id, 400, b"as good later", eval_return=-12.5)

    items = client.get(f"/v1/experiments/{experiment_id}/checkpoints").json()["items"]
    assert [(c["step"], c["eval_return"], c["best"]) for c in items] == [
        (100, None, False),
        (200, -12.5, True),  # the earliest of equal returns
        (300, -40.0, False),
        (400, -12.5, False),
    ]
    response = client.get(best_url, follow_redirects=True)
    assert response.status_code == 200
    assert response.content == b"peak"
    assert response.headers["etag"] == f'"{hashlib.sha256(b"peak").hexdigest()}"'
    assert client.head(best_url).status_code == 200


def test_a_checkpoint_downloads_whole_with_length_and_etag(
    client: TestClient, session: Session, storage: ArtifactStore, experiment_id: str
) -> None:
    data = bytes(range(256)) * 10_000  # several chunks
    row = _store_checkpoint(session, storage, experiment_id, 100, data)
    url = _url(experiment_id, row)

    response = client.get(url)

    assert response.status_code == 200
    assert response.content == data
    assert response.headers["content-length"] == str(len(data))
    assert response.headers["etag"] == f'"{hashlib.sha256(data).hexdigest()}"'
    assert response.headers["accept-ranges"] == "bytes"
    assert response.headers["content-type"] == "application/octet-stream"
    assert response.headers["content-disposition"] == (
        f'attachment; filename="{experiment_id}-step100.ckpt"'
    )
    head = client.head(url)
    assert head.status_code == 200 and head.headers["content-length"] == str(len(data))
    assert head.content == b""
    cached = client.get(url, headers={"if-none-match": response.headers["etag"]})
    assert cached.status_code == 304 and cached.content == b""


def test_a_checkpoint_serves_byte_ranges(
    client: TestClient, session: Session, storage: ArtifactStore, experiment_id: str
) -> None:
    data = b"0123456789abcdefghij"
    row = _store_checkpoint(session, storage, experiment_id, 100, data)
    url = _url(experiment_id, row)
    etag = f'"{row.sha256}"'

    partial = client.get(url, headers={"range": "bytes=5-9"})
    tail = client.get(url, headers={"range": "bytes=-4"})
    outside = client.get(url, headers={"range": "bytes=100-200"})
    malformed = client.get(url, headers={"range": "pages=1-2"})
    several = client.get(url, headers={"range": "bytes=0-1,5-6"})
    same = client.get(url, headers={"range": "bytes=5-9", "if-range": etag})
    changed = client.get(url, headers={"range": "bytes=5-9", "if-range": '"other"'})

    assert partial.status_code == 206 and partial.content == b"56789"
    assert partial.headers["content-range"] == "bytes 5-9/20"
    assert partial.headers["content-length"] == "5"
    assert tail.status_code == 206 and tail.content == b"ghij"
    assert outside.status_code == 416
    assert outside.json()["error"]["code"] == "range_not_satisfiable"
    assert outside.headers["content-range"] == "bytes */20"
    assert malformed.status_code == 400 and malformed.json()["error"]["code"] == "invalid_range"
    assert several.status_code == 200 and several.content == data
    assert same.status_code == 206 and same.content == b"56789"
    assert changed.status_code == 200 and changed.content == data


def test_missing_checkpoints_and_files_are_404(
    client: TestClient, session: Session, storage: ArtifactStore, experiment_id: str
) -> None:
    row = _store_checkpoint(session, storage, experiment_id, 100, b"data")
    storage.delete(row.path)

    gone = client.get(_url(experiment_id, row))
    unknown = client.get(
        f"/v1/experiments/{experiment_id}/checkpoints/01JAAAAAAAAAAAAAAAAAAAAAAA/file"
    )

    assert gone.status_code == 404 and gone.json()["error"]["code"] == "file_missing"
    assert gone.json()["error"]["message"] == (
        f"the file of checkpoint {row.id} is missing from the artifact storage"
    )
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"


def test_a_file_that_is_not_the_recorded_one_is_never_served_whole(
    client: TestClient, session: Session, storage: ArtifactStore, experiment_id: str
) -> None:
    resized = _store_checkpoint(session, storage, experiment_id, 100, b"weights")
    rewritten = _store_checkpoint(session, storage, experiment_id, 200, b"weights")
    storage.put(resized.path, lambda p: p.write_bytes(b"other weights"))
    storage.put(rewritten.path, lambda p: p.write_bytes(b"WEIGHTS"))

    wrong_size = client.get(_url(experiment_id, resized))

    assert wrong_size.status_code == 410
    assert wrong_size.json()["error"]["code"] == "file_corrupt"
    # Same size, other bytes: found only by hashing, so the body is cut before its end.
    with pytest.raises(ObjectCorrupt, match="not the recorded"):
        client.get(_url(experiment_id, rewritten))


def test_an_unreachable_store_is_503(
    settings: Settings,
    rollback_sessions: sessionmaker[Session],
    session: Session,
    keys: dict[str, str],
    experiment_id: str,
    tmp_path: Path,
    aws_env: None,
) -> None:
    row = CheckpointRepository(session).record(
        experiment_id, 100, checkpoint_key(experiment_id, 100), 4, "0" * 64
    )
    session.commit()
    gone = S3Store(
        "s3://models/marlforge",
        endpoint_url=f"http://127.0.0.1:{free_port()}",
        cache_dir=tmp_path / "cache",
    )
    app = create_app(settings, session_factory=rollback_sessions, storage=gone)
    with TestClient(app, headers=bearer(keys["member"])) as client:
        response = client.get(_url(experiment_id, row))

    assert response.status_code == 503
    assert response.json()["error"]["code"] == "storage_unavailable"
    assert response.headers["retry-after"] == "5"


@pytest.fixture
def bucket(s3_server: MotoServer, s3_url: str, tmp_path: Path) -> S3Store:
    """A bucket whose presigned URLs name the store as its clients reach it (``localhost``), not
    as the API does (``127.0.0.1``)."""
    return S3Store(
        s3_url,
        endpoint_url=s3_server.endpoint,
        public_endpoint_url=f"http://localhost:{s3_server.port}",
        cache_dir=tmp_path / "cache",
    )


def test_with_a_url_lifetime_an_s3_download_is_a_redirect_the_store_serves(
    settings: Settings,
    rollback_sessions: sessionmaker[Session],
    session: Session,
    keys: dict[str, str],
    experiment_id: str,
    bucket: S3Store,
    s3_server: MotoServer,
) -> None:
    data = bytes(range(256)) * 8_000
    row = _store_checkpoint(session, bucket, experiment_id, 100, data)
    url = _url(experiment_id, row)
    app = create_app(
        settings.model_copy(update={"download_url_ttl_s": 120}),
        session_factory=rollback_sessions,
        storage=bucket,
    )
    with TestClient(app, headers=bearer(keys["member"])) as client:
        redirect = client.get(url, follow_redirects=False)
        head = client.head(url)
        anonymous = client.get(url, headers={"authorization": ""}, follow_redirects=False)

    assert redirect.status_code == 307
    assert redirect.headers["etag"] == f'"{row.sha256}"'
    assert redirect.headers["cache-control"] == "no-store"
    location = redirect.headers["location"]
    assert location.startswith(f"http://localhost:{s3_server.port}/")
    assert "X-Amz-Expires=120" in location and "X-Amz-Signature=" in location
    assert anonymous.status_code == 401  # the URL is handed out to keys of the project only
    assert head.status_code == 200 and head.headers["content-length"] == str(len(data))
    # The client follows it without the API's key: the store serves the bytes and the ranges.
    whole = httpx.get(location)
    part = httpx.get(location, headers={"range": "bytes=5-9"})
    assert whole.status_code == 200
    assert hashlib.sha256(whole.content).hexdigest() == row.sha256
    assert whole.headers["content-disposition"] == (
        f'attachment; filename="{experiment_id}-step100.ckpt"'
    )
    assert part.status_code == 206 and part.content == data[5:10]
    assert httpx.get(location.split("?")[0]).status_code == 403  # the signature is what lets it


def test_a_redirect_is_never_given_for_a_missing_or_rewritten_object(
    settings: Settings,
    rollback_sessions: sessionmaker[Session],
    session: Session,
    keys: dict[str, str],
    experiment_id: str,
    bucket: S3Store,
) -> None:
    missing = _store_checkpoint(session, bucket, experiment_id, 100, b"weights")
    rewritten = _store_checkpoint(session, bucket, experiment_id, 200, b"weights")
    bucket.delete(missing.path)
    bucket.put(rewritten.path, lambda p: p.write_bytes(b"WEIGHTS"))  # same size, other bytes
    app = create_app(
        settings.model_copy(update={"download_url_ttl_s": 60}),
        session_factory=rollback_sessions,
        storage=bucket,
    )
    with TestClient(app, headers=bearer(keys["member"])) as client:
        gone = client.get(_url(experiment_id, missing), follow_redirects=False)
        other = client.get(_url(experiment_id, rewritten), follow_redirects=False)

    assert gone.status_code == 404 and gone.json()["error"]["code"] == "file_missing"
    # Caught without reading the bytes: the object's sha256 metadata is not the recorded one.
    assert other.status_code == 410 and other.json()["error"]["code"] == "file_corrupt"
    assert "sha256" in other.json()["error"]["message"]


def test_a_directory_store_streams_even_with_a_url_lifetime(
    settings: Settings,
    rollback_sessions: sessionmaker[Session],
    session: Session,
    keys: dict[str, str],
    experiment_id: str,
) -> None:
    directory = FilesystemStore(settings.artifacts_dir)
    row = _store_checkpoint(session, directory, experiment_id, 100, b"weights")
    app = create_app(
        settings.model_copy(update={"download_url_ttl_s": 60}),
        session_factory=rollback_sessions,
        storage=directory,
    )
    with TestClient(app, headers=bearer(keys["member"])) as client:
        response = client.get(_url(experiment_id, row), follow_redirects=False)

    assert response.status_code == 200 and response.content == b"weights"
