"""Environment suites on the deployed shape: ``marlforge api`` and ``marlforge worker`` processes
on PostgreSQL and Redis.

A worker that serves only gymnasium and mpe (``MARLFORGE_WORKER_SUITES``) lists them in the
registry and consumes only their queues; a run of the example plugin's suite
(``examples/gridcoop``, installed by ``make install``) waits queued in its suite's queue, saying
why, untouched by that worker; a second worker that serves every suite it can build takes it and
trains it through the API, metrics and checkpoints included. Then one tiny run of each new
built-in suite trains on that worker."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_support import RAN_TO_SUCCESS, Api, ServiceProcess, create_key, free_port, service_env

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.integration]

WAITING = "waiting for a worker that serves the gridcoop environments: the live torch workers "


class SuiteStack:
    def __init__(self, folder: Path, pg_url: str, redis_url: str, prefix: str) -> None:
        self.env = service_env(
            {
                "MARLFORGE_DATABASE_URL": pg_url,
                "MARLFORGE_BROKER_URL": redis_url,
                "MARLFORGE_QUEUE_PREFIX": prefix,
                "MARLFORGE_VAR_DIR": str(folder / "var"),
                "MARLFORGE_ARTIFACTS_DIR": str(folder / "artifacts"),
                "MARLFORGE_POLL_INTERVAL_S": "0.2",
                "MARLFORGE_WORKER_HEARTBEAT_INTERVAL_S": "0.5",
            }
        )
        self.folder, self.redis_url, self.prefix = folder, redis_url, prefix
        port = free_port()
        self.api_process = ServiceProcess(
            ["api", "--host", "127.0.0.1", "--port", str(port)], self.env, folder / "api.log"
        )
        self.api = Api(f"http://127.0.0.1:{port}", create_key(self.env))
        self.workers: list[ServiceProcess] = []

    def worker(self, name: str, **env: str) -> ServiceProcess:
        process = ServiceProcess(
            ["worker", "--backend", "torch"],
            {**self.env, "MARLFORGE_WORKER_NAME": name, **env},
            self.folder / f"{name}.log",
        )
        self.workers.append(process)
        process.wait_for_output(" ready.")
        return process

    def queue_length(self, queue: str) -> int:
        import redis

        connection = redis.Redis.from_url(self.redis_url)
        try:
            return int(connection.llen(f"{self.prefix}{queue}"))
        finally:
            connection.close()

    def stop(self) -> None:
        self.api.http.close()
        self.api_process.stop()
        for worker in self.workers:
            worker.stop()
        import redis

        connection = redis.Redis.from_url(self.redis_url)
        for key in connection.scan_iter(match=f"*{self.prefix}*"):
            connection.delete(key)
        connection.close()


@pytest.fixture(scope="module")
def suite_stack(
    tmp_path_factory: pytest.TempPathFactory, pg_url: str, redis_url: str, queue_prefix: str
) -> Iterator[SuiteStack]:
    stack = SuiteStack(
        tmp_path_factory.mktemp("suites"), pg_url, redis_url, f"{queue_prefix}suites."
    )
    try:
        stack.api.wait_ready(process=stack.api_process)
        yield stack
    finally:
        stack.stop()


def _spec(algorithm: str, suite: str, env_id: str, **kwargs: Any) -> dict[str, Any]:
    fields = {"hidden_sizes": [16, 16]}
    if algorithm in ("maddpg", "wqmix"):
        fields |= {"batch_size": 16, "learning_starts": 50}
    else:
        fields |= {"rollout_length": 32}
    return {
        "name": f"{suite}-{env_id}",
        "algorithm": algorithm,
        "backend": "torch",
        "env": {"suite": suite, "id": env_id, "num_envs": 2, "kwargs": kwargs},
        "total_steps": 128,
        "seed": 7,
        "hyperparameters": fields,
        "evaluation": {"every_steps": 128, "episodes": 1},
        "checkpoint": {"every_steps": 128, "keep_last": 1},
    }


def _workers(api: Api) -> dict[str, Any]:
    return {
        w["id"]: w for w in api.http.get("/v1/workers", params={"live": "true"}).json()["items"]
    }


def _registered(api: Api, name: str) -> dict[str, Any]:
    """The worker's row once its first beat (a thread of its own, after it is ready) wrote it."""
    deadline = time.monotonic() + 30
    while name not in (listed := _workers(api)):
        assert time.monotonic() < deadline, f"worker {name} never registered"
        time.sleep(0.2)
    return dict(listed[name])


def test_a_plugin_run_waits_for_a_worker_that_serves_its_suite_then_trains(
    suite_stack: SuiteStack,
) -> None:
    api = suite_stack.api
    narrow = f"narrow-{secrets.token_hex(3)}"
    narrow_worker = suite_stack.worker(narrow, MARLFORGE_WORKER_SUITES="gymnasium,mpe")
    assert _registered(api, narrow)["suites"] == ["gymnasium", "mpe"]

    run = api.submit(_spec("mappo", "gridcoop", "signal_v0"))
    assert api.get(run["id"])["status_reason"].startswith(WAITING)
    # Its message waits in the gridcoop queue, which the narrow worker does not consume.
    time.sleep(3)
    assert suite_stack.queue_length("torch.gridcoop") == 1
    waiting = api.get(run["id"])
    assert (waiting["status"], waiting["worker"]) == ("queued", None)
    assert waiting["status_reason"].startswith(WAITING)
    assert api.transitions(run["id"]) == [(None, "queued")]
    assert run["id"] not in narrow_worker.output()

    wide = f"wide-{secrets.token_hex(3)}"
    suite_stack.worker(wide)
    assert "gridcoop" in _registered(api, wide)["suites"]
    done = api.wait_until(run["id"], {"succeeded"}, timeout=180)
    assert done["worker"]["id"] == wide
    assert api.transitions(run["id"]) == RAN_TO_SUCCESS
    names = {m["name"] for m in api.all_metrics(run["id"])}
    assert "eval/episode_return" in names
    assert api.checkpoints(run["id"])
    # The runs below go to the wide worker alone.
    narrow_worker.stop()
    suite_stack.workers.remove(narrow_worker)


@pytest.mark.parametrize(
    ("algorithm", "suite", "env_id", "kwargs"),
    [
        ("maddpg", "mpe", "simple_speaker_listener_v4", {}),
        ("ippo", "sisl", "pursuit_v4", {"max_cycles": 50}),
        ("mappo", "mamujoco", "HalfCheetah-2x3", {}),
        ("wqmix", "lbf", "Foraging-8x8-2p-2f-coop-v3", {}),
        ("mappo", "rware", "rware-tiny-2ag-v2", {}),
    ],
)
def test_each_new_suite_trains_through_the_api(
    suite_stack: SuiteStack, algorithm: str, suite: str, env_id: str, kwargs: dict[str, Any]
) -> None:
    if not any("gridcoop" in (w["suites"] or []) for w in _workers(suite_stack.api).values()):
        suite_stack.worker(f"wide-{secrets.token_hex(3)}")
    api = suite_stack.api
    run = api.submit(_spec(algorithm, suite, env_id, **kwargs))
    try:
        done = api.wait_until(run["id"], {"succeeded"}, timeout=240)
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}; status_reason: {api.get(run['id'])['status_reason']}"
        ) from exc
    assert done["progress"]["step"] >= 128
    assert api.checkpoints(run["id"])
