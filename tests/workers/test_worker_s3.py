"""Runs whose artifacts live in an S3 bucket (moto's server, its own process), on "hosts" that share
nothing on disk: each run gets a store with its own local folder, as a worker on another machine
would. A run moves between hosts through the bucket; the API, on a third folder, serves its final
checkpoint and renders a replay into the bucket; a corrupt or deleted object fails the resume and
keeps every record; a store killed under a running job fails it with the upload's reason and keeps
the earlier checkpoints listed."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from api.app import create_app
from core.dispatch.queue import CeleryDispatcher
from core.enums import EventKind, ExperimentStatus
from core.experiments import service as experiments
from core.lifecycle import transition
from core.models import Checkpoint, Experiment, ExperimentEvent, MetricPointRow
from core.settings import Settings
from core.storage import ObjectCorrupt
from core.storage.s3 import S3Store
from tests.auth_support import bearer, new_key
from tests.s3_support import MotoServer
from workers.outcome import Outcome, RunLimits
from workers.runs.job import run_experiment

S = ExperimentStatus
pytestmark = [pytest.mark.slow, pytest.mark.integration]


@pytest.fixture
def host(tmp_path: Path, s3_server: MotoServer, s3_url: str) -> Callable[[str], S3Store]:
    """The store as the worker (or API) on host ``name`` opens it: the shared bucket, and a local
    folder of that host's own."""

    def on(name: str) -> S3Store:
        return S3Store(s3_url, endpoint_url=s3_server.endpoint, cache_dir=tmp_path / name / "cache")

    return on


def _row(session_factory: sessionmaker[Session], experiment_id: str) -> Experiment:
    with session_factory() as session:
        row = session.get(Experiment, experiment_id)
        assert row is not None
        return row


def _checkpoints(session_factory: sessionmaker[Session], experiment_id: str) -> list[Checkpoint]:
    with session_factory() as session:
        query = select(Checkpoint).where(Checkpoint.experiment_id == experiment_id)
        return list(session.scalars(query.order_by(Checkpoint.step)))


def _metric_keys(session_factory: sessionmaker[Session], experiment_id: str) -> list[Any]:
    with session_factory() as session:
        query = select(MetricPointRow.step, MetricPointRow.name).where(
            MetricPointRow.experiment_id == experiment_id
        )
        return sorted(tuple(r) for r in session.execute(query))


def _log(session_factory: sessionmaker[Session], experiment_id: str) -> list[str]:
    with session_factory() as session:
        payloads = session.scalars(
            select(ExperimentEvent.payload)
            .where(ExperimentEvent.experiment_id == experiment_id)
            .where(ExperimentEvent.kind == EventKind.LOG)
            .order_by(ExperimentEvent.id)
        )
        return [p["message"] for p in payloads]


def _files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


def _run_until_checkpoint(
    run: Callable[[], Outcome], session_factory: sessionmaker[Session], experiment_id: str
) -> tuple[threading.Thread, list[Outcome]]:
    """Start ``run`` in a thread and return once the run has recorded a checkpoint."""
    result: list[Outcome] = []
    thread = threading.Thread(target=lambda: result.append(run()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not _checkpoints(session_factory, experiment_id):
        assert time.monotonic() < deadline and thread.is_alive(), "no checkpoint was recorded"
        time.sleep(0.05)
    return thread, result


@pytest.fixture
def api(
    tmp_path: Path, pg_url: str, s3_server: MotoServer, s3_url: str
) -> Iterator[Callable[[sessionmaker[Session]], TestClient]]:
    """The API on a folder of its own, its store made from its settings, as in production."""
    clients: list[TestClient] = []

    def make(session_factory: sessionmaker[Session]) -> TestClient:
        settings = Settings(
            var_dir=tmp_path / "api" / "var",
            database_url=pg_url,
            broker_url="filesystem://",
            artifacts_url=s3_url,
            s3_endpoint_url=s3_server.endpoint,
            queue_prefix="workertest.",
        )
        client = TestClient(create_app(settings, session_factory=session_factory))
        client.headers.update(bearer(new_key(session_factory, settings)))
        clients.append(client)
        return client.__enter__()

    yield make
    for client in clients:
        client.__exit__(None, None, None)


def test_a_run_moves_between_hosts_through_the_bucket_and_downloads_whole(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    limits: RunLimits,
    dispatcher: CeleryDispatcher,
    host: Callable[[str], S3Store],
    api: Callable[[sessionmaker[Session]], TestClient],
    tmp_path: Path,
) -> None:
    # The newest two only (no best kept beside them), so the bucket's objects are the listed two.
    keep = {"every_steps": 200, "keep_last": 2, "keep_best": False}
    experiment_id = submit(tiny_spec(total_steps=1000, checkpoint=keep))
    first, second = host("worker-1"), host("worker-2")
    thread, result = _run_until_checkpoint(
        lambda: run_experiment(experiment_id, session_factory, first, limits, worker_id="w1"),
        session_factory,
        experiment_id,
    )
    with session_factory() as session:
        experiments.cancel(session, experiment_id)
    thread.join(timeout=120)
    assert result == [Outcome.DONE]
    cancelled = _row(session_factory, experiment_id)
    assert cancelled.status == S.CANCELLED and cancelled.step < 1000
    resumed_from = _checkpoints(session_factory, experiment_id)[-1]
    assert resumed_from.step == cancelled.step
    with session_factory() as session:
        experiments.resume(session, dispatcher, experiment_id)

    assert run_experiment(experiment_id, session_factory, second, limits, worker_id="w2") == (
        Outcome.DONE
    )

    row = _row(session_factory, experiment_id)
    assert row.status == S.SUCCEEDED and row.step == 1000, row.status_reason
    checkpoints = _checkpoints(session_factory, experiment_id)
    assert len(checkpoints) == 2 and checkpoints[-1].step == 1000
    assert second.list(f"experiments/{experiment_id}/") == [c.path for c in checkpoints]
    fetched = [m for m in _log(session_factory, experiment_id) if m.startswith("fetched")]
    assert fetched == [
        f"fetched the checkpoint at step {resumed_from.step:,} from "
        f"{second.locate(resumed_from.path)} ({resumed_from.size_bytes:,} bytes, sha256 verified)"
    ]
    # Nothing stays on either host: uploads and the resume copy are gone.
    assert _files(tmp_path / "worker-1") == [] and _files(tmp_path / "worker-2") == []

    client = api(session_factory)
    final = checkpoints[-1]
    url = f"/v1/experiments/{experiment_id}/checkpoints/{final.id}/file"
    whole = client.get(url)
    part = client.get(url, headers={"range": "bytes=100-199"})

    assert whole.status_code == 200
    assert hashlib.sha256(whole.content).hexdigest() == final.sha256
    assert whole.headers["etag"] == f'"{final.sha256}"'
    assert int(whole.headers["content-length"]) == final.size_bytes
    assert part.status_code == 206 and part.content == whole.content[100:200]
    assert part.headers["content-range"] == f"bytes 100-199/{final.size_bytes}"


@pytest.mark.parametrize("fault", ["corrupt", "deleted"])
def test_a_resume_from_a_corrupt_or_deleted_object_fails_and_keeps_every_record(
    fault: str,
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    limits: RunLimits,
    dispatcher: CeleryDispatcher,
    host: Callable[[str], S3Store],
    s3_server: MotoServer,
    api: Callable[[sessionmaker[Session]], TestClient],
) -> None:
    experiment_id = submit(tiny_spec(total_steps=400))
    assert run_experiment(experiment_id, session_factory, host("worker-1"), limits) == Outcome.DONE
    with session_factory() as session:
        transition(session, experiment_id, [S.SUCCEEDED], S.FAILED, "for the test")
        session.commit()
        experiments.resume(session, dispatcher, experiment_id)
    checkpoints = _checkpoints(session_factory, experiment_id)
    metrics = _metric_keys(session_factory, experiment_id)
    latest = checkpoints[-1]
    store = host("worker-2")
    bucket, key = store.bucket, f"{store.prefix}/{latest.path}"
    tampered = b"\0" * latest.size_bytes
    if fault == "corrupt":
        s3_server.client().put_object(Bucket=bucket, Key=key, Body=tampered)
    else:
        s3_server.client().delete_object(Bucket=bucket, Key=key)

    assert run_experiment(experiment_id, session_factory, store, limits) == Outcome.DONE

    row = _row(session_factory, experiment_id)
    at = f"the checkpoint at step 400 ({latest.path})"
    kept = "so the run cannot continue from it; its records are kept"
    assert row.status == S.FAILED and row.step == 400
    assert row.status_reason == (
        f"{at} is corrupt in the artifact storage (its sha256 is "
        f"{hashlib.sha256(tampered).hexdigest()}, its record says {latest.sha256}), {kept}"
        if fault == "corrupt"
        else f"{at} is missing from the artifact storage, {kept}"
    )
    assert [c.id for c in _checkpoints(session_factory, experiment_id)] == [
        c.id for c in checkpoints
    ]
    assert _metric_keys(session_factory, experiment_id) == metrics
    assert store.stat(checkpoints[0].path) == checkpoints[0].size_bytes
    assert _files(store.cache_dir) == []
    # The API says the same of the download: a 404, or a body that is never completed.
    client = api(session_factory)
    url = f"/v1/experiments/{experiment_id}/checkpoints/{latest.id}/file"
    if fault == "deleted":
        gone = client.get(url)
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "file_missing"
    else:
        with pytest.raises(ObjectCorrupt, match="not the recorded"):
            client.get(url)


def test_a_store_killed_under_a_running_job_fails_it_with_the_upload_and_keeps_the_checkpoints(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    limits: RunLimits,
    tmp_path: Path,
    aws_env: None,
) -> None:
    server = MotoServer(tmp_path)  # its own server: this one is killed
    server.start()
    try:
        store = S3Store(
            f"s3://{server.new_bucket()}/deploy", endpoint_url=server.endpoint, cache_dir=tmp_path
        )
        experiment_id = submit(tiny_spec(total_steps=100_000))
        thread, result = _run_until_checkpoint(
            lambda: run_experiment(experiment_id, session_factory, store, limits),
            session_factory,
            experiment_id,
        )
        earlier = _checkpoints(session_factory, experiment_id)
        server.kill()
        thread.join(timeout=180)
    finally:
        server.stop()

    assert result == [Outcome.DONE]
    row = _row(session_factory, experiment_id)
    assert row.status == S.FAILED, row.status_reason
    assert row.status_reason is not None
    assert row.status_reason.startswith(
        f"checkpoint upload to {store.url}/experiments/{experiment_id}/checkpoints/step-"
    ), row.status_reason
    assert " failed: " in row.status_reason
    listed = _checkpoints(session_factory, experiment_id)
    assert [c.id for c in listed[: len(earlier)]] == [c.id for c in earlier]
    assert list(tmp_path.rglob("*.part")) == []


def test_a_replay_is_rendered_from_the_bucket_and_stored_in_it(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    limits: RunLimits,
    host: Callable[[str], S3Store],
    api: Callable[[sessionmaker[Session]], TestClient],
    tmp_path: Path,
) -> None:
    experiment_id = submit(tiny_spec(total_steps=200))
    worker = host("worker-1")
    assert run_experiment(experiment_id, session_factory, worker, limits) == Outcome.DONE
    checkpoint = _checkpoints(session_factory, experiment_id)[-1]
    client = api(session_factory)
    url = f"/v1/experiments/{experiment_id}/checkpoints/{checkpoint.id}/replay.gif"

    first = client.get(url)
    again = client.get(url)

    assert first.status_code == 200, first.text
    assert first.headers["content-type"] == "image/gif" and first.content[:6] == b"GIF89a"
    assert again.content == first.content
    replay = f"experiments/{experiment_id}/replays/{checkpoint.id}-{checkpoint.sha256[:16]}.gif"
    assert worker.list(f"experiments/{experiment_id}/replays/") == [replay]
    assert b"".join(worker.read(replay)) == first.content
    assert _files(tmp_path / "api" / "var" / "cache") == []  # the checkpoint's copy is gone
