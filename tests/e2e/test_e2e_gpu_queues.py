"""GPU queues and the registry of workers on the deployed shape: ``marlforge api`` and a plain
``marlforge worker --backend torch`` as processes on PostgreSQL and Redis.

The worker registers itself (class ``cpu``, a queue per suite) and keeps its row fresh; a ``cuda``
run's message waits in Redis's ``torch-gpu.gymnasium`` list, which the plain worker never takes,
while a ``cpu`` run beside it trains and records the device it ran on; the ``cuda`` run says why
it waits until a live GPU worker of its backend is in the registry (a row written here as a GPU
worker's heartbeat writes it: this host has no GPU to start one), and again once that row is
stale; a worker that stops removes its row."""

from __future__ import annotations

import datetime as dt
import secrets
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_support import RAN_TO_SUCCESS, Api, ServiceProcess, create_key, free_port, service_env
from sqlalchemy.orm import Session, sessionmaker

from core.db import make_engine, make_session_factory, utcnow
from core.enums import ResourceClass
from core.fleet.repository import WorkerRepository
from core.models import WorkerRecord
from learners.enums import Backend
from learners.envs.suites.installed import buildable_suites

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.integration]

WAITING = (
    "waiting for a GPU worker: no torch worker with a GPU is registered "
    "(docs/deployment.md, 'A GPU host')"
)
BEAT_S = 0.5


class GpuStack:
    """The API, one plain torch worker, and the session's database and Redis."""

    def __init__(
        self, folder: Path, pg_url: str, redis_url: str, prefix: str, worker_name: str
    ) -> None:
        self.prefix = prefix
        self.worker_name = worker_name
        self.redis_url = redis_url
        env = service_env(
            {
                "MARLFORGE_DATABASE_URL": pg_url,
                "MARLFORGE_BROKER_URL": redis_url,
                "MARLFORGE_QUEUE_PREFIX": prefix,
                "MARLFORGE_VAR_DIR": str(folder / "var"),
                "MARLFORGE_ARTIFACTS_DIR": str(folder / "artifacts"),
                "MARLFORGE_POLL_INTERVAL_S": "0.2",
                "MARLFORGE_WORKER_HEARTBEAT_INTERVAL_S": str(BEAT_S),
            }
        )
        port = free_port()
        self.api_process = ServiceProcess(
            ["api", "--host", "127.0.0.1", "--port", str(port)], env, folder / "api.log"
        )
        self.worker = ServiceProcess(
            ["worker", "--backend", "torch"],
            {**env, "MARLFORGE_WORKER_NAME": worker_name},
            folder / "worker.log",
        )
        self.api = Api(f"http://127.0.0.1:{port}", create_key(env))
        self.engine = make_engine(pg_url)
        self.sessions: sessionmaker[Session] = make_session_factory(self.engine)

    def llen(self, queue: str) -> int:
        import redis

        connection = redis.Redis.from_url(self.redis_url)
        try:
            return int(connection.llen(f"{self.prefix}{queue}"))
        finally:
            connection.close()

    def messages(self, queue: str) -> list[bytes]:
        import redis

        connection = redis.Redis.from_url(self.redis_url)
        try:
            return list(connection.lrange(f"{self.prefix}{queue}", 0, -1))
        finally:
            connection.close()

    def rows(self, worker_id: str) -> list[WorkerRecord]:
        with self.sessions() as session:
            return WorkerRepository(session).of(worker_id)

    def stop(self) -> None:
        self.api.http.close()
        self.api_process.stop()
        self.worker.stop()
        with self.sessions() as session:
            WorkerRepository(session).remove(self.worker_name)
            session.commit()
        self.engine.dispose()
        import redis

        connection = redis.Redis.from_url(self.redis_url)
        for key in connection.scan_iter(match=f"*{self.prefix}*"):
            connection.delete(key)
        connection.close()


@pytest.fixture(scope="module")
def gpu_stack(
    tmp_path_factory: pytest.TempPathFactory, pg_url: str, redis_url: str, queue_prefix: str
) -> Iterator[GpuStack]:
    folder = tmp_path_factory.mktemp("gpu-queues")
    name = f"e2e-plain-{secrets.token_hex(3)}"
    stack = GpuStack(folder, pg_url, redis_url, f"{queue_prefix}gpuq.", name)
    try:
        stack.api.wait_ready(process=stack.api_process)
        stack.worker.wait_for_output(" ready.")
        yield stack
    finally:
        stack.stop()


def _eventually(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_a_plain_worker_registers_itself_and_keeps_its_row_fresh(gpu_stack: GpuStack) -> None:
    _eventually(lambda: bool(gpu_stack.rows(gpu_stack.worker_name)), "the worker never registered")
    (row,) = gpu_stack.rows(gpu_stack.worker_name)

    assert row.backend == Backend.TORCH and row.resource_class == ResourceClass.CPU
    # One queue per suite it serves (every one this host can build).
    assert row.queues == [f"{gpu_stack.prefix}torch.{s}" for s in buildable_suites()]
    assert row.gpus == [] and row.suites == list(buildable_suites())
    assert row.hostname == socket.gethostname()
    first_seen = row.last_seen_at
    _eventually(
        lambda: gpu_stack.rows(gpu_stack.worker_name)[0].last_seen_at > first_seen,
        "the worker's row was not refreshed",
        timeout=10 * BEAT_S,
    )


def _register_gpu_worker(stack: GpuStack, seen_s_ago: float) -> None:
    seen = utcnow() - dt.timedelta(seconds=seen_s_ago)
    with stack.sessions() as session:
        WorkerRepository(session).put(
            [
                WorkerRecord(
                    id=f"{stack.worker_name}-gpu",
                    backend=Backend.TORCH,
                    hostname="gpu-host",
                    queues=[f"{stack.prefix}torch-gpu.gymnasium", f"{stack.prefix}torch.gymnasium"],
                    resource_class=ResourceClass.GPU,
                    gpus=["NVIDIA H100 80GB HBM3"],
                    started_at=seen,
                    last_seen_at=seen,
                )
            ]
        )
        session.commit()


def test_a_cuda_run_waits_on_the_gpu_queue_while_a_cpu_run_trains(
    gpu_stack: GpuStack, tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    api = gpu_stack.api
    cuda = api.submit(tiny_spec(name="needs-a-gpu", device="cuda"))
    try:
        # The message waits in Redis's list of the GPU queue, not the plain one.
        assert gpu_stack.llen("torch-gpu.gymnasium") == 1
        assert cuda["id"].encode() in gpu_stack.messages("torch-gpu.gymnasium")[0]
        assert api.get(cuda["id"])["status_reason"] == WAITING

        cpu = api.submit(tiny_spec(name="on-the-cpu", device="cpu"))
        done = api.wait_until(cpu["id"], {"succeeded"}, timeout=180)

        assert done["device"] == "cpu"
        assert api.transitions(cpu["id"]) == RAN_TO_SUCCESS
        # The plain worker took the cpu run and left the cuda one where it was.
        waiting = api.get(cuda["id"])
        assert (waiting["status"], waiting["status_reason"]) == ("queued", WAITING)
        assert waiting["device"] is None and waiting["worker"] is None
        assert api.transitions(cuda["id"]) == [(None, "queued")]
        assert gpu_stack.llen("torch-gpu.gymnasium") == 1
        listed = api.http.get("/v1/experiments", params={"status": "queued"}).json()["items"]
        assert [e["status_reason"] for e in listed if e["id"] == cuda["id"]] == [WAITING]

        # A live GPU worker of torch in the registry: the run no longer says it waits for one.
        _register_gpu_worker(gpu_stack, seen_s_ago=0)
        assert api.get(cuda["id"])["status_reason"] is None
        # Its row goes stale (its heartbeat stopped): the reason is back.
        _register_gpu_worker(gpu_stack, seen_s_ago=60)
        assert api.get(cuda["id"])["status_reason"] == WAITING
    finally:
        api.http.post(f"/v1/experiments/{cuda['id']}/cancel")
        with gpu_stack.sessions() as session:
            WorkerRepository(session).remove(f"{gpu_stack.worker_name}-gpu")
            session.commit()


def test_a_worker_that_stops_removes_its_row(gpu_stack: GpuStack) -> None:
    assert gpu_stack.rows(gpu_stack.worker_name)

    assert gpu_stack.worker.stop() == 0

    assert gpu_stack.rows(gpu_stack.worker_name) == []
