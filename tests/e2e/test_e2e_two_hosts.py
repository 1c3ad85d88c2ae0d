"""Workers on other machines (issue #25), on the deployment path: PostgreSQL, Redis, an S3 store
(moto's server, its own process), ``marlforge api`` and two ``marlforge worker`` processes, each
"host" with its own var folder and nothing on disk in common. The workers and the API reach the
store through a TCP link of its own (``tests/storage/cutting_proxy.py``), which the test kills
and starts again to take the store away from everyone for a while.

- A run trains on host 1, is cancelled after its first checkpoint, host 1 is killed, and the run
  is resumed and finished on host 2 from the bucket; every checkpoint downloads whole through the
  API with its sha256, and no host ever held the store's files outside its own cache.
- The store goes away in the middle of a run and comes back: the run carries on (the worker
  tries the upload again, saying so in the run's log), ``/readyz`` names the store while it is
  away, and every checkpoint listed afterwards is whole.
"""

from __future__ import annotations

import hashlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Api, ServiceProcess, create_key, free_port, service_env

from tests.s3_support import MotoServer

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.xdist_group("two-hosts")]

LINK = Path(__file__).parents[1] / "storage" / "cutting_proxy.py"


class StoreLink:
    """The network path from every host to the store: a forwarding process on its own port."""

    def __init__(self, target_port: int) -> None:
        self.port = free_port()
        self.target_port = target_port
        self.process: subprocess.Popen[str] | None = None

    def up(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(LINK), str(self.port), str(self.target_port), "0"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None and self.process.stdout.readline() == "ready\n"

    def down(self) -> None:
        """Kill the link: connections in progress are reset, new ones refused."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)


class Hosts:
    """The API on one host and workers on others, each with a var folder of its own."""

    def __init__(self, folder: Path, env: dict[str, str], bucket: str) -> None:
        self.folder = folder
        self.env = env
        self.bucket = bucket
        self.processes: list[ServiceProcess] = []
        port = free_port()
        api_env = self.host_env("api-host")
        self.api_process = self._start(["api", "--port", str(port)], api_env, "api-host")
        self.api = Api(f"http://127.0.0.1:{port}", create_key(api_env))
        self.admin_key = create_key(api_env, role="admin")  # /readyz's reasons are for admins
        self.api.wait_ready(process=self.api_process)

    def host_env(self, name: str) -> dict[str, str]:
        return {**self.env, "MARLFORGE_VAR_DIR": str(self.folder / name / "var")}

    def _start(self, args: list[str], env: dict[str, str], name: str) -> ServiceProcess:
        process = ServiceProcess(args, env, self.folder / f"{name}.log")
        self.processes.append(process)
        return process

    def start_worker(self, name: str) -> ServiceProcess:
        env = {**self.host_env(name), "MARLFORGE_WORKER_NAME": name}
        worker = self._start(["worker", "--backend", "torch"], env, name)
        worker.wait_for_output(" ready.")
        return worker

    def stop(self) -> None:
        self.api.http.close()
        for process in self.processes:
            process.stop(timeout=30)


@pytest.fixture(scope="module")
def link(s3_server: MotoServer) -> Iterator[StoreLink]:
    running = StoreLink(s3_server.port)
    running.up()
    try:
        yield running
    finally:
        running.down()


@pytest.fixture(scope="module")
def hosts(
    tmp_path_factory: pytest.TempPathFactory,
    s3_server: MotoServer,
    link: StoreLink,
    pg_url: str,
    redis_url: str,
    queue_prefix: str,
) -> Iterator[Hosts]:
    bucket = s3_server.new_bucket()
    prefix = f"{queue_prefix}hosts."
    env = service_env(
        {
            "MARLFORGE_DATABASE_URL": pg_url,
            "MARLFORGE_BROKER_URL": redis_url,
            "MARLFORGE_QUEUE_PREFIX": prefix,
            "MARLFORGE_ARTIFACTS_URL": f"s3://{bucket}/deployment",
            "MARLFORGE_S3_ENDPOINT_URL": f"http://127.0.0.1:{link.port}",
            "MARLFORGE_POLL_INTERVAL_S": "0.2",
            "MARLFORGE_STORE_OUTAGE_S": "60",
            # A shared secret, as every API process and CLI of a deployment has.
            "MARLFORGE_SECRET_KEY": "two-hosts-test-secret",
        }
    )
    running = Hosts(tmp_path_factory.mktemp("hosts"), env, bucket)
    try:
        yield running
    finally:
        running.stop()
        import redis

        connection = redis.Redis.from_url(redis_url)
        for key in connection.scan_iter(match=f"*{prefix}*"):
            connection.delete(key)


def _downloaded_whole(api: Api, experiment_id: str) -> list[dict[str, Any]]:
    """Every listed checkpoint, downloaded through the API; each must match its sha256."""
    listed = api.checkpoints(experiment_id)
    for checkpoint in listed:
        response = api.http.get(
            f"/v1/experiments/{experiment_id}/checkpoints/{checkpoint['id']}/file"
        )
        assert response.status_code == 200, response.text
        assert len(response.content) == checkpoint["size_bytes"]
        assert hashlib.sha256(response.content).hexdigest() == checkpoint["sha256"]
    return listed


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def test_a_run_cancelled_on_one_host_finishes_on_another_through_the_bucket(
    hosts: Hosts, tiny_spec: Any
) -> None:
    api = hosts.api
    first = hosts.start_worker("host-1")
    run = api.submit(tiny_spec(total_steps=3000, name="moves-hosts"))["id"]
    deadline = time.monotonic() + 180
    while not api.checkpoints(run):
        assert time.monotonic() < deadline, api.get(run)
        time.sleep(0.2)
    assert api.http.post(f"/v1/experiments/{run}/cancel").status_code == 200
    cancelled = api.wait_until(run, {"cancelled"})
    assert cancelled["worker"]["id"] == "host-1"
    before = api.checkpoints(run)
    first.process.send_signal(signal.SIGKILL)  # host 1 is gone, its disk with it
    first.process.wait(timeout=10)

    hosts.start_worker("host-2")
    assert api.http.post(f"/v1/experiments/{run}/resume").status_code == 200
    done = api.wait_until(run, {"succeeded"}, timeout=300)

    assert done["worker"]["id"] == "host-2"
    assert done["progress"]["step"] == 3000
    statuses = [to for _, to in api.transitions(run)]
    assert statuses[-4:] == ["cancelled", "queued", "running", "succeeded"]
    listed = _downloaded_whole(api, run)
    assert listed[-1]["step"] == 3000
    assert listed[0]["step"] >= before[-1]["step"]  # resumed from host 1's last checkpoint
    steps = [(p["step"], p["name"]) for p in api.all_metrics(run)]
    assert len(steps) == len(set(steps))  # no metric step written twice across the move
    # Neither host kept a store of its own: the checkpoints lived only in the bucket, and host
    # 2's copy of the one it resumed from is gone from its cache.
    for name in ("host-1", "host-2", "api-host"):
        var = hosts.folder / name / "var"
        assert not (var / "artifacts").exists()
        assert not [f for f in _files(var / "cache") if f.endswith(".ckpt")], name


def test_a_store_that_goes_away_mid_run_costs_the_run_nothing(
    hosts: Hosts, link: StoreLink, s3_server: MotoServer, tiny_spec: Any
) -> None:
    api = hosts.api
    if not any(p.process.poll() is None for p in hosts.processes[1:]):
        hosts.start_worker("host-3")
    run = api.submit(tiny_spec(total_steps=4000, name="store-outage"))["id"]
    deadline = time.monotonic() + 180
    while not api.checkpoints(run):
        assert time.monotonic() < deadline, api.get(run)
        time.sleep(0.2)

    link.down()
    try:
        away = api.http.get("/readyz", headers={"authorization": f"Bearer {hosts.admin_key}"})
        time.sleep(8.0)  # several checkpoints' worth of training
        during = api.get(run)
    finally:
        link.up()
    done = api.wait_until(run, {"succeeded"}, timeout=300)

    assert away.status_code == 503
    assert "unreachable" in away.json()["checks"]["artifacts"]
    assert during["status"] == "running"
    assert api.http.get("/readyz").status_code == 200
    logs = api.http.get(
        f"/v1/experiments/{run}/events", params={"format": "json", "kinds": "log", "limit": 5000}
    ).json()["items"]
    retries = [e["data"]["message"] for e in logs if "trying again in" in e["data"]["message"]]
    assert retries, "the worker never said it was waiting for the store"
    listed = _downloaded_whole(api, run)
    assert listed[-1]["step"] == done["progress"]["step"] == 4000
    # Nothing half-written: no object under the run's checkpoints that is not listed, and no
    # unfinished multipart upload.
    store = s3_server.client()
    objects = store.list_objects_v2(
        Bucket=hosts.bucket, Prefix=f"deployment/experiments/{run}/checkpoints/"
    ).get("Contents", [])
    assert sorted(o["Size"] for o in objects) == sorted(c["size_bytes"] for c in listed)
    assert not store.list_multipart_uploads(Bucket=hosts.bucket).get("Uploads")
