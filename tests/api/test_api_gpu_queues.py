"""GPU queues over HTTP on the session's PostgreSQL (each test rolled back) and a real broker
transport: a ``cuda`` run is queued on its backend's GPU queue (submitted, resumed, or started by
its sweep), ``cpu`` and ``auto`` runs on the plain one, and a ``cuda`` spec of a backend that
cannot use a GPU (MindSpore) is refused, experiment or sweep; a ``cuda`` run says it waits for a GPU
worker while the registry of workers holds no live GPU worker of its backend, and stops saying so
when one is registered; the run record shows the device it ran on."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from core.db import utcnow
from core.enums import ExperimentStatus, ResourceClass
from core.fleet.repository import WorkerRepository
from core.lifecycle import transition
from core.models import Experiment, WorkerRecord
from core.settings import Settings
from learners.enums import Backend

pytestmark = pytest.mark.integration

S = ExperimentStatus
Messages = Callable[[], list[dict[str, Any]]]
WAITING = (
    "waiting for a GPU worker: no torch worker with a GPU is registered "
    "(docs/deployment.md, 'A GPU host')"
)


def _submit(client: TestClient, spec: dict[str, Any], **changes: Any) -> dict[str, Any]:
    response = client.post("/v1/experiments", json={**spec, **changes})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def _queue_of(messages: Messages, experiment_id: str) -> list[str]:
    return [m["queue"] for m in messages() if m["args"] == [experiment_id]]


def _register(
    session: Session,
    backend: Backend,
    resource: ResourceClass,
    seen_s_ago: float = 0.0,
    worker_id: str = "gpu-host-1",
) -> None:
    """A worker's row in the registry, as its heartbeat writes it."""
    seen = utcnow() - dt.timedelta(seconds=seen_s_ago)
    queues = [f"apitest.{backend}-gpu", f"apitest.{backend}"]
    WorkerRepository(session).put(
        [
            WorkerRecord(
                id=worker_id,
                backend=backend,
                hostname="gpu-host",
                queues=queues if resource == ResourceClass.GPU else queues[1:],
                resource_class=resource,
                gpus=["NVIDIA H100 80GB HBM3"] if resource == ResourceClass.GPU else [],
                started_at=seen,
                last_seen_at=seen,
            )
        ]
    )
    session.commit()


def _reason(client: TestClient, experiment_id: str) -> str | None:
    read: str | None = client.get(f"/v1/experiments/{experiment_id}").json()["status_reason"]
    listed = client.get("/v1/experiments", params={"limit": 100}).json()["items"]
    (item,) = [e for e in listed if e["id"] == experiment_id]
    assert item["status_reason"] == read, "the list and the read say the same"
    return read


def test_a_cuda_run_goes_to_the_gpu_queue_and_cpu_and_auto_to_the_plain_one(
    client: TestClient, example_spec: dict[str, Any], queued_messages: Messages
) -> None:
    cuda = _submit(client, example_spec, device="cuda")
    cpu = _submit(client, example_spec, device="cpu")
    auto = _submit(client, example_spec, device="auto")

    assert _queue_of(queued_messages, cuda["id"]) == ["apitest.torch-gpu.gymnasium"]
    assert _queue_of(queued_messages, cpu["id"]) == ["apitest.torch.gymnasium"]
    assert _queue_of(queued_messages, auto["id"]) == ["apitest.torch.gymnasium"]
    assert cuda["status_reason"] == WAITING
    assert cpu["status_reason"] is None and auto["status_reason"] is None
    assert cuda["device"] is None


def test_a_cuda_spec_of_a_backend_that_cannot_use_a_gpu_is_refused(
    client: TestClient, example_spec: dict[str, Any], queued_messages: Messages, session: Session
) -> None:
    # MindSpore is installed as its CPU build: a cuda run of it could never start, so it is
    # refused at submission, naming the field and why, instead of failing on its worker.
    spec = {**example_spec, "backend": "mindspore", "device": "cuda"}
    # Counted, not assumed empty: tests that run real workers commit runs to the same database.
    stored = len(session.scalars(select(Experiment.id)).all())
    refused = client.post("/v1/experiments", json=spec)

    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["code"] == "invalid_spec"
    (problem,) = refused.json()["error"]["fields"]
    assert problem["field"] == "device"
    assert "the mindspore backend cannot use a GPU" in problem["reason"]
    assert "CPU build" in problem["reason"] and "tensorflow, torch" in problem["reason"]
    assert queued_messages() == []
    assert len(session.scalars(select(Experiment.id)).all()) == stored

    # Its cpu and auto runs are queued as before, and a cuda run of a backend with a GPU too.
    cpu = _submit(client, example_spec, backend="mindspore", device="cpu")
    auto = _submit(client, example_spec, backend="mindspore", device="auto")
    cuda = _submit(client, example_spec, backend="torch", device="cuda")
    assert cpu["status"] == auto["status"] == cuda["status"] == "queued"
    assert _queue_of(queued_messages, cpu["id"]) == ["apitest.mindspore.gymnasium"]
    assert _queue_of(queued_messages, auto["id"]) == ["apitest.mindspore.gymnasium"]
    assert _queue_of(queued_messages, cuda["id"]) == ["apitest.torch-gpu.gymnasium"]


def test_a_sweep_of_cuda_runs_of_a_backend_that_cannot_use_a_gpu_is_refused(
    client: TestClient, example_spec: dict[str, Any], queued_messages: Messages
) -> None:
    base = {k: v for k, v in example_spec.items() if k != "seed"}

    in_base = client.post(
        "/v1/sweeps", json={"base": {**base, "backend": "mindspore", "device": "cuda"}, "seeds": 2}
    )
    swept = client.post(
        "/v1/sweeps",
        json={
            "base": {**base, "backend": "mindspore"},
            "space": {"grid": {"device": ["cpu", "cuda"]}},
            "seeds": 1,
        },
    )

    assert in_base.status_code == 422, in_base.text
    (problem,) = in_base.json()["error"]["fields"]
    assert problem["field"] == "base.device"
    assert "the mindspore backend cannot use a GPU" in problem["reason"]
    assert swept.status_code == 422, swept.text
    (problem,) = swept.json()["error"]["fields"]
    assert problem["field"] == "space.grid.device"
    assert (
        '"cuda"' in problem["reason"] and "mindspore backend cannot use a GPU" in problem["reason"]
    )
    assert queued_messages() == []
    assert client.get("/v1/sweeps").json()["items"] == []


def test_the_waiting_reason_follows_the_registry_of_gpu_workers(
    client: TestClient, example_spec: dict[str, Any], session: Session, settings: Settings
) -> None:
    run = _submit(client, example_spec, device="cuda")
    assert _reason(client, run["id"]) == WAITING

    # Neither a CPU worker of the backend, nor a GPU worker of another backend, is one.
    _register(session, Backend.TORCH, ResourceClass.CPU, worker_id="cpu-host-1")
    _register(session, Backend.TENSORFLOW, ResourceClass.GPU, worker_id="tf-gpu-host")
    assert _reason(client, run["id"]) == WAITING

    _register(session, Backend.TORCH, ResourceClass.GPU)
    assert _reason(client, run["id"]) is None

    # Its heartbeat stops: once its row is older than the staleness limit it no longer counts.
    stale_s = settings.worker_heartbeat_stale_s
    _register(session, Backend.TORCH, ResourceClass.GPU, seen_s_ago=stale_s - 5)
    assert _reason(client, run["id"]) is None
    _register(session, Backend.TORCH, ResourceClass.GPU, seen_s_ago=stale_s + 1)
    assert _reason(client, run["id"]) == WAITING


def test_a_requeued_cuda_run_keeps_its_stored_reason_before_the_waiting_one(
    client: TestClient, example_spec: dict[str, Any], session: Session
) -> None:
    run = _submit(client, example_spec, device="cuda")
    lost = "worker w-3 lost at step 1,000; restarting from the start (restart 1 of 3)"
    assert transition(session, run["id"], [S.QUEUED], S.RUNNING, "started", worker_id="w-3")
    assert transition(session, run["id"], [S.RUNNING], S.QUEUED, lost)
    session.commit()

    assert _reason(client, run["id"]) == f"{lost}; {WAITING}"
    # Running, it waits for nothing: the stored reason alone.
    assert transition(session, run["id"], [S.QUEUED], S.RUNNING, "started on worker w-4")
    session.commit()
    assert _reason(client, run["id"]) == "started on worker w-4"


def test_a_resumed_or_swept_cuda_run_goes_to_the_gpu_queue(
    client: TestClient, example_spec: dict[str, Any], queued_messages: Messages
) -> None:
    run = _submit(client, example_spec, device="cuda")
    assert client.post(f"/v1/experiments/{run['id']}/cancel").status_code == 200
    assert client.post(f"/v1/experiments/{run['id']}/resume").status_code == 200
    assert _queue_of(queued_messages, run["id"]) == ["apitest.torch-gpu.gymnasium"] * 2

    base = {k: v for k, v in example_spec.items() if k != "seed"}
    sweep = client.post(
        "/v1/sweeps",
        json={"name": "on gpus", "base": {**base, "device": "cuda"}, "seeds": 2},
    )
    assert sweep.status_code == 201, sweep.text
    runs = client.get("/v1/experiments", params={"sweep_id": sweep.json()["id"]}).json()["items"]
    assert len(runs) == 2
    for swept in runs:
        assert _queue_of(queued_messages, swept["id"]) == ["apitest.torch-gpu.gymnasium"]


def test_a_queue_position_counts_only_the_runs_of_the_same_queue(
    client: TestClient, example_spec: dict[str, Any]
) -> None:
    first_cuda = _submit(client, example_spec, device="cuda")
    cpu = _submit(client, example_spec, device="cpu")
    second_cuda = _submit(client, example_spec, device="cuda")
    auto = _submit(client, example_spec, device="auto")

    assert second_cuda["queue_position"] == first_cuda["queue_position"] + 1
    assert auto["queue_position"] == cpu["queue_position"] + 1


def test_the_run_record_shows_the_device_its_worker_recorded(
    client: TestClient, example_spec: dict[str, Any], session: Session
) -> None:
    run = _submit(client, example_spec)
    session.execute(
        update(Experiment).where(Experiment.id == run["id"]).values(device="cuda:0 (NVIDIA H100)")
    )
    session.commit()

    assert client.get(f"/v1/experiments/{run['id']}").json()["device"] == "cuda:0 (NVIDIA H100)"
    schema = client.get("/openapi.json").json()["components"]["schemas"]["ExperimentOut"]
    assert "cuda:<index> (<GPU name>)" in schema["properties"]["device"]["description"]
