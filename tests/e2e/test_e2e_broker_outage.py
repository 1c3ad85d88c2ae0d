"""Redis lost and back during a run, on the deployment's broker: a redis-server of the test's own
(the shared one is never touched) under ``marlforge up`` with PostgreSQL.

The sequence that left a Celery worker alive but deaf (celery issues 8030, 9054, 10205, 10302):
a run finishes while Redis is down, so its acknowledgement fails; Redis comes back; the next run
must still be taken. Here the worker's consumer watchdog (``workers.watchdog``) finds itself idle
beside a waiting message, stops, and ``marlforge up`` starts a fresh worker that takes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2e_support import Api, RedisServer, ServiceProcess, free_port, service_env

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def _readyz(api: Api) -> tuple[int, dict[str, Any]]:
    response = api.http.get("/readyz")
    return response.status_code, response.json()


def test_a_run_that_ends_while_redis_is_down_leaves_no_deaf_worker(
    tmp_path: Path,
    pg_url: str,
    queue_prefix: str,
    redis_server: RedisServer,
    tiny_spec: Callable[..., dict[str, Any]],
) -> None:
    port = free_port()
    env = service_env(
        {
            "MARLFORGE_VAR_DIR": str(tmp_path / "var"),
            "MARLFORGE_DATABASE_URL": pg_url,
            "MARLFORGE_BROKER_URL": redis_server.url,
            "MARLFORGE_QUEUE_PREFIX": f"{queue_prefix}outage.",
            "MARLFORGE_POLL_INTERVAL_S": "0.2",
            "MARLFORGE_WORKER_DEAF_AFTER_S": "8",
            "MARLFORGE_SHUTDOWN_GRACE_S": "30",
        }
    )
    up = ServiceProcess(["up", "--port", str(port)], env, tmp_path / "up.log")
    try:
        probe = Api(f"http://127.0.0.1:{port}")
        probe.wait_ready(process=up)
        probe.http.close()
        api = Api(f"http://127.0.0.1:{port}", (tmp_path / "var" / "admin.key").read_text().strip())
        first = api.submit(tiny_spec(total_steps=1600))["id"]
        api.wait_until(first, {"running"}, min_step=200)

        redis_server.kill()
        status, body = _readyz(api)
        assert status == 503 and body["checks"]["broker"] != "ok"
        done = api.wait_until(first, {"succeeded"}, timeout=180)  # finished while Redis was down
        # The worker tries to acknowledge the job, and cannot (its run's process may take seconds
        # to exit after the run recorded its end, on a loaded machine).
        up.wait_for_output("Couldn't ack", timeout=90)
        redis_server.start()
        deadline = time.monotonic() + 30
        while _readyz(api)[0] != 200:
            assert time.monotonic() < deadline, "the API never saw the broker again"
            time.sleep(0.5)

        second = api.submit(tiny_spec(total_steps=200))["id"]
        api.wait_until(second, {"succeeded"}, timeout=180)

        points = api.all_metrics(first)
        keys = [(p["step"], p["name"]) for p in points]
        assert len(keys) == len(set(keys)) and done["progress"]["step"] == 1600
        assert up.process.poll() is None
        log = up.output()
        assert "Couldn't ack" in log  # the sequence that leaves a Celery worker deaf happened
        assert "it is not consuming" in log and "starting it again" in log
    except (AssertionError, httpx.HTTPError):
        print(up.output()[-6000:])
        raise
    finally:
        up.stop(timeout=60)
