"""Lost workers on the deployment path (PostgreSQL, Redis, ``marlforge api`` and ``marlforge
worker`` as separate processes): a worker killed with SIGKILL, as a preempted node or the
kernel's OOM killer does, and a fresh worker started beside the dead one.

The run is taken over from its latest checkpoint (not after the broker's visibility timeout),
twice, and ends with bitwise the same weights as the same spec never interrupted; its metrics,
events and checkpoints stay whole. Leases are short here (4 s) to keep the test bounded; the
default is 60 s.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from e2e_support import Api, ServiceProcess, create_key, free_port, service_env

from learners.checkpoint import read
from workers import proctree

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

LEASE_TTL_S = 4.0
TAKEOVER = re.compile(
    r"worker (?P<worker>\S+) lost at step (?P<lost>[\d,]+); restarting from the checkpoint at "
    r"step (?P<checkpoint>[\d,]+) \(restart (?P<restart>\d) of 3\)"
)
RECOVERY_LIMIT_S = 120.0


class Deployment:
    """The API and workers started and killed one by one, as an operator's machines."""

    def __init__(self, folder: Path, pg_url: str, redis_url: str, queue_prefix: str) -> None:
        self.folder = folder
        self.env = service_env(
            {
                "MARLFORGE_DATABASE_URL": pg_url,
                "MARLFORGE_BROKER_URL": redis_url,
                "MARLFORGE_QUEUE_PREFIX": queue_prefix,
                "MARLFORGE_VAR_DIR": str(folder / "var"),
                "MARLFORGE_ARTIFACTS_DIR": str(folder / "artifacts"),
                "MARLFORGE_POLL_INTERVAL_S": "0.2",
                "MARLFORGE_LEASE_TTL_S": str(LEASE_TTL_S),
                "MARLFORGE_REAPER_INTERVAL_S": "0.5",
            }
        )
        self.processes: list[ServiceProcess] = []
        port = free_port()
        self.api_process = self._start(["api", "--host", "127.0.0.1", "--port", str(port)], "api")
        self.api = Api(f"http://127.0.0.1:{port}", create_key(self.env))
        self.api.wait_ready(process=self.api_process)

    def _start(self, args: list[str], name: str) -> ServiceProcess:
        process = ServiceProcess(args, self.env, self.folder / f"{name}.log")
        self.processes.append(process)
        return process

    def start_worker(self, name: str) -> ServiceProcess:
        worker = self._start(["worker", "--backend", "torch"], name)
        worker.wait_for_output(" ready.")
        return worker

    def stop(self) -> None:
        self.api.http.close()
        for process in self.processes:
            process.stop(timeout=30)


@pytest.fixture
def deployment(
    tmp_path: Path, pg_url: str, redis_url: str, queue_prefix: str
) -> Iterator[Deployment]:
    running = Deployment(tmp_path, pg_url, redis_url, f"{queue_prefix}faults.")
    try:
        yield running
    finally:
        running.stop()
        import redis

        connection = redis.Redis.from_url(redis_url)
        for key in connection.scan_iter(match=f"*{queue_prefix}faults.*"):
            connection.delete(key)


def kill_hard(worker: ServiceProcess) -> None:
    """SIGKILL the worker process alone; the run's process must not outlive it."""
    tree = proctree.tree(worker.process.pid)
    assert len(tree) >= 2, "the worker has no run process"
    os.kill(worker.process.pid, signal.SIGKILL)
    worker.process.wait(timeout=10)
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in tree[1:]):
        assert time.monotonic() < deadline, "the run's process outlived its worker"
        time.sleep(0.1)


def running_again(
    api: Api, experiment_id: str, restarts: int, lost_at: float
) -> tuple[dict[str, Any], float]:
    """Wait for the run to run on a new worker after ``restarts`` takeovers; the run and the
    seconds since its worker was lost (``lost_at``, a ``time.monotonic()``)."""
    started = lost_at
    while True:
        body = api.get(experiment_id)
        if body["status"] == "running" and body["restarts"] == restarts:
            return body, time.monotonic() - started
        assert body["status"] in {"running", "queued"}, body["status_reason"]
        assert time.monotonic() - started < RECOVERY_LIMIT_S, f"not running again: {body}"
        time.sleep(0.2)


def final_tensors(api: Api, experiment_id: str, folder: Path) -> dict[str, np.ndarray]:
    last = api.checkpoints(experiment_id)[-1]
    path = folder / f"{experiment_id}.ckpt"
    path.write_bytes(
        api.http.get(f"/v1/experiments/{experiment_id}/checkpoints/{last['id']}/file").content
    )
    tensors, _ = read(path)
    return tensors


def assert_whole(api: Api, experiment_id: str) -> None:
    """No metric step twice, event ids unique and increasing, each checkpoint matches its sha256."""
    points = api.all_metrics(experiment_id)
    keys = [(p["step"], p["name"]) for p in points]
    assert len(keys) == len(set(keys))
    events = api.http.get(
        f"/v1/experiments/{experiment_id}/events", params={"format": "json", "limit": 1000}
    ).json()["items"]
    ids = [e["id"] for e in events]
    assert ids == sorted(set(ids))
    for checkpoint in api.checkpoints(experiment_id):
        url = f"/v1/experiments/{experiment_id}/checkpoints/{checkpoint['id']}/file"
        assert hashlib.sha256(api.http.get(url).content).hexdigest() == checkpoint["sha256"]


def test_a_run_whose_worker_is_killed_twice_is_taken_over_and_ends_bitwise_the_same(
    deployment: Deployment, tiny_spec: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    # Pendulum's episodes are 200 steps on each of 2 copies: checkpoints every 400 steps fall on
    # episode boundaries, where a resume is exact.
    spec = tiny_spec(
        total_steps=3200,
        evaluation={"every_steps": 400, "episodes": 1},
        checkpoint={"every_steps": 400, "keep_last": 10},
    )
    api = deployment.api
    worker = deployment.start_worker("worker-1")
    reference = api.submit({**spec, "name": "never interrupted"})
    api.wait_until(reference["id"], {"succeeded"}, timeout=300)

    run = api.submit({**spec, "name": "killed twice"})["id"]
    recoveries = []
    for restart, kill_after in ((1, 1000), (2, 2200)):
        body = api.wait_until(run, {"running"}, min_step=kill_after, timeout=300)
        lost_by = body["worker"]["id"]
        lost_at = time.monotonic()
        kill_hard(worker)
        worker = deployment.start_worker(f"worker-{restart + 1}")
        body, seconds = running_again(api, run, restart, lost_at)
        recoveries.append(seconds)
        assert body["worker"]["id"] != lost_by
        reason = api.http.get(f"/v1/experiments/{run}/timeline").json()["items"][-2]["reason"]
        found = TAKEOVER.fullmatch(reason)
        assert found is not None and found["worker"] == lost_by, reason
        lost_at, resumed_at = (int(found[k].replace(",", "")) for k in ("lost", "checkpoint"))
        assert 0 < resumed_at <= lost_at and resumed_at % 400 == 0
        assert int(found["restart"]) == restart
    done = api.wait_until(run, {"succeeded"}, timeout=300)
    print(f"from kill to running again: {', '.join(f'{s:.1f} s' for s in recoveries)}")

    assert (done["restarts"], done["attempts"]) == (2, 3)
    assert_whole(api, run)
    expected = final_tensors(api, reference["id"], tmp_path)
    recovered = final_tensors(api, run, tmp_path)
    assert set(recovered) == set(expected)
    different = [k for k in expected if not np.array_equal(recovered[k], expected[k])]
    assert different == []
    evals = [
        [(p["step"], p["value"]) for p in api.all_metrics(e) if p["name"] == "eval/episode_return"]
        for e in (reference["id"], run)
    ]
    assert evals[0] == evals[1] and len(evals[0]) == 8
