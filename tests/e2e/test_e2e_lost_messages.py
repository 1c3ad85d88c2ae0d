"""The database is the queue of record (``core.dispatch.reconcile``): runs whose messages the broker
lost still run. On the deployed shape: ``marlforge api`` and ``marlforge worker`` processes on a
PostgreSQL database and a redis-server of the test's own (the shared ones are never touched;
the stacks of other tests share the session's database, and this reconciler would take their
queued runs).

Three runs wait queued with no worker up; Redis is killed and started again without its data (as
a crash, a failover or a lost volume does), so their messages are gone. The API's reconciler finds
the queued runs with no message in the broker and sends each again, once; a worker then takes
them and all three succeed, each started once."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from e2e_support import (
    RAN_TO_SUCCESS,
    Api,
    RedisServer,
    ServiceProcess,
    create_key,
    free_port,
    service_env,
)

from core import migrate
from core.dispatch.reconcile import RESENT

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.integration]


def _queue_length(redis_server: RedisServer, queue: str) -> int:
    import redis

    connection = redis.Redis.from_url(redis_server.url)
    try:
        return int(connection.llen(queue))
    finally:
        connection.close()


def _resent_logs(api: Api, experiment_id: str) -> list[str]:
    page = api.http.get(
        f"/v1/experiments/{experiment_id}/events", params={"format": "json", "kinds": "log"}
    ).json()
    return [e["data"]["message"] for e in page["items"] if e["data"]["message"] == RESENT]


def test_runs_whose_messages_redis_lost_are_sent_again_and_succeed(
    tmp_path: Path,
    fresh_postgres_url: str,
    queue_prefix: str,
    redis_server: RedisServer,
    tiny_spec: Callable[..., dict[str, Any]],
) -> None:
    migrate.upgrade(fresh_postgres_url)
    prefix = f"{queue_prefix}lost."
    env = service_env(
        {
            "MARLFORGE_VAR_DIR": str(tmp_path / "var"),
            "MARLFORGE_ARTIFACTS_DIR": str(tmp_path / "artifacts"),
            "MARLFORGE_DATABASE_URL": fresh_postgres_url,
            "MARLFORGE_BROKER_URL": redis_server.url,
            "MARLFORGE_QUEUE_PREFIX": prefix,
            "MARLFORGE_POLL_INTERVAL_S": "0.2",
            "MARLFORGE_RECONCILE_INTERVAL_S": "1",
            "MARLFORGE_DISPATCH_GRACE_S": "2",
        }
    )
    port = free_port()
    api_process = ServiceProcess(
        ["api", "--host", "127.0.0.1", "--port", str(port)], env, tmp_path / "api.log"
    )
    worker: ServiceProcess | None = None
    api = Api(f"http://127.0.0.1:{port}", create_key(env))
    queue = f"{prefix}torch.gymnasium"
    try:
        api.wait_ready(process=api_process)
        runs = [api.submit(tiny_spec(name=f"lost-{i}", total_steps=200))["id"] for i in range(3)]
        assert _queue_length(redis_server, queue) == 3
        # Sent once, held by the broker: the reconciler leaves them alone past its grace.
        time.sleep(4)
        assert _queue_length(redis_server, queue) == 3
        assert [_resent_logs(api, r) for r in runs] == [[], [], []]

        redis_server.kill()
        # No data after the restart (--save "" and no append-only file). The list is not checked
        # empty here: the reconciler, a second away, may already have refilled it. That the
        # messages were lost shows below: each run is sent again exactly once, which the
        # reconciler does only for a run whose message the broker does not hold.
        redis_server.start()
        deadline = time.monotonic() + 30
        while _queue_length(redis_server, queue) < 3:
            assert time.monotonic() < deadline, "the lost messages were never sent again"
            time.sleep(0.5)
        positions = [api.get(r)["queue_position"] for r in runs]
        assert positions == [1, 2, 3]  # the database's order, from the database alone

        worker = ServiceProcess(
            ["worker", "--backend", "torch"],
            {**env, "MARLFORGE_WORKER_NAME": "lost-worker"},
            tmp_path / "worker.log",
        )
        for run in runs:
            done = api.wait_until(run, {"succeeded"}, timeout=180)
            assert done["progress"]["step"] >= 200
            assert api.transitions(run) == RAN_TO_SUCCESS
            assert _resent_logs(api, run) == [RESENT]  # sent again once, never doubled
        assert _queue_length(redis_server, queue) == 0
    except AssertionError:
        print(api_process.output()[-4000:])
        raise
    finally:
        api.http.close()
        api_process.stop()
        if worker is not None:
            worker.stop()
