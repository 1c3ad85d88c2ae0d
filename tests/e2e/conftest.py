"""End-to-end fixtures: the service as separate processes, started with the commands the
deployment uses (``marlforge api``, ``marlforge worker [--backend ...]``) on the session's
PostgreSQL database and Redis."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from e2e_support import (
    Api,
    RedisServer,
    ServiceProcess,
    Stack,
    create_key,
    free_port,
    service_env,
)


@contextmanager
def _running_stack(
    folder: Path, worker_args: list[str], pg_url: str, redis_url: str, queue_prefix: str
) -> Iterator[Stack]:
    """The API and one worker (``marlforge worker <worker_args>``) as processes."""
    port = free_port()
    env = service_env(
        {
            "MARLFORGE_DATABASE_URL": pg_url,
            "MARLFORGE_BROKER_URL": redis_url,
            "MARLFORGE_QUEUE_PREFIX": queue_prefix,
            "MARLFORGE_VAR_DIR": str(folder / "var"),
            "MARLFORGE_ARTIFACTS_DIR": str(folder / "artifacts"),
            "MARLFORGE_POLL_INTERVAL_S": "0.2",
            "MARLFORGE_SWEEP_INTERVAL_S": "0.5",
        }
    )
    worker = ServiceProcess(["worker", *worker_args], env, folder / "worker.log")
    api = ServiceProcess(
        ["api", "--host", "127.0.0.1", "--port", str(port)], env, folder / "api.log"
    )
    client = Api(f"http://127.0.0.1:{port}", create_key(env))
    try:
        client.wait_ready(process=api)
        worker.wait_for_output(" ready.")
        yield Stack(client, worker, env)
    finally:
        client.http.close()
        api.stop()
        worker.stop()
        _forget_queues(redis_url, queue_prefix)


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, pg_url: str, redis_url: str, queue_prefix: str
) -> Iterator[Api]:
    """The API and one torch worker as processes; yields a client of the API."""
    folder = tmp_path_factory.mktemp("stack")
    args = ["--backend", "torch"]
    with _running_stack(folder, args, pg_url, redis_url, queue_prefix) as running:
        yield running.api


@pytest.fixture(scope="module")
def full_stack(
    tmp_path_factory: pytest.TempPathFactory, pg_url: str, redis_url: str, queue_prefix: str
) -> Iterator[Stack]:
    """The API and one worker consuming every backend's queue (``marlforge worker``, as in
    ``make up``), as processes."""
    folder = tmp_path_factory.mktemp("full-stack")
    with _running_stack(folder, [], pg_url, redis_url, queue_prefix) as running:
        yield running


@pytest.fixture
def fresh_stack(
    tmp_path_factory: pytest.TempPathFactory, pg_url: str, redis_url: str
) -> Iterator[Stack]:
    """The API and one torch worker as processes on queues of the test's own (no other test's
    run is on them)."""
    folder = tmp_path_factory.mktemp("fresh-stack")
    prefix = f"fresh-{secrets.token_hex(4)}."
    with _running_stack(folder, ["--backend", "torch"], pg_url, redis_url, prefix) as running:
        yield running


def _forget_queues(redis_url: str, queue_prefix: str) -> None:
    import redis

    connection = redis.Redis.from_url(redis_url)
    for key in connection.scan_iter(match=f"*{queue_prefix}*"):
        connection.delete(key)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of the test's own (the shared one is never touched), killed afterwards."""
    server = RedisServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        if server.process is not None and server.process.poll() is None:
            server.kill()
