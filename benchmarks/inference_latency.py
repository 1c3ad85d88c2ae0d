"""The inference route's latency and throughput: ``POST .../checkpoints/{cid}/act`` against the
API as deployed (``marlforge api`` in its own process, the embedded defaults: SQLite, a directory
store), for batches of 1 and of 1,024 observations.

    python benchmarks/inference_latency.py --requests 300 --batches 1 1024

One experiment and one checkpoint of a MAPPO learner on simple_spread_v3 (3 agents, 18-wide
observations, the registry's default networks) are stored first, and a member key made. One client
in this process sends the requests one after another over one keep-alive connection (the first,
which loads the policy, is timed apart). Printed per batch size: the body's size, median and p99
latency, and observations answered per second (batch x requests / wall time); beside each, the
same observations acted on in this process by ``load_policy`` (PyTorch) and by ``NumpyPolicy``
(what the route runs), without HTTP or JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402
import numpy as np  # noqa: E402

from core.settings import Settings  # noqa: E402


def prepare(settings: Settings, folder: Path) -> tuple[str, str, str]:
    """Migrate, store one experiment with one checkpoint, make a member key: (experiment id,
    checkpoint id, key)."""
    from core import migrate
    from core.auth import service as auth
    from core.auth.tokens import server_secret
    from core.db import make_engine, make_session_factory
    from core.dispatch.queue import CeleryDispatcher
    from core.enums import Role
    from core.experiments import service as experiments
    from core.experiments.checkpoints import CheckpointRepository
    from core.storage import checkpoint_key, store_for
    from learners.admission.parse import parse_spec
    from tests.api.checkpoint_support import learner_checkpoint

    migrate.upgrade(settings.database_url)
    engine = make_engine(settings.database_url)
    env = {
        "suite": "mpe",
        "id": "simple_spread_v3",
        "num_envs": 1,
        "kwargs": {"continuous_actions": False},
    }
    spec = {"name": "inference", "algorithm": "mappo", "backend": "torch", "env": env}
    path = learner_checkpoint(folder / "mappo.safetensors", spec)
    store = store_for(settings)
    with make_session_factory(engine)() as session:
        project = auth.ensure_project(session, "default")
        key = auth.create_key(session, server_secret(settings), project, Role.MEMBER, "bench")
        run = experiments.submit(
            session,
            CeleryDispatcher(settings),
            parse_spec({**spec, "total_steps": 1000}),
            project.id,
        )
        stored = store.put(checkpoint_key(run.id, 1000), lambda p: p.write_bytes(path.read_bytes()))
        row = CheckpointRepository(session).record(
            run.id, 1000, stored.key, stored.size_bytes, stored.sha256, None
        )
        session.commit()
        ids = (run.id, row.id, key.token)
    engine.dispose()
    return ids


def start_api(settings: Settings, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARLFORGE_")}
    env.update(
        {
            "MARLFORGE_DATABASE_URL": settings.database_url,
            "MARLFORGE_BROKER_URL": settings.broker_url,
            "MARLFORGE_VAR_DIR": str(settings.var_dir),
            "MARLFORGE_LOG_LEVEL": "WARNING",
        }
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "marlforge", "api", "--port", str(port)],
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
                if answer.status == 200:
                    return process
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the API did not start:\n{log.read_text()}")
        time.sleep(0.25)


def measure(url: str, key: str, batch: int, requests: int) -> None:
    rng = np.random.default_rng(batch)
    observations = {
        f"agent_{i}": rng.uniform(-1, 1, (batch, 18)).astype(np.float32).tolist() for i in range(3)
    }
    body = json.dumps({"observations": observations}).encode()
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    with httpx.Client(timeout=60) as client:
        started = time.perf_counter()
        first = client.post(url, content=body, headers=headers)
        first_s = time.perf_counter() - started
        first.raise_for_status()
        assert len(first.json()["actions"]["agent_0"]) == batch
        latencies = []
        wall = time.perf_counter()
        for _ in range(requests):
            started = time.perf_counter()
            response = client.post(url, content=body, headers=headers)
            latencies.append(time.perf_counter() - started)
            response.raise_for_status()
        wall = time.perf_counter() - wall
    ms = sorted(1000 * x for x in latencies)
    p99 = ms[min(len(ms) - 1, int(0.99 * len(ms)))]
    print(
        f"| {batch:,} | HTTP, {len(body):,} bytes | {1000 * first_s:.1f} | "
        f"{statistics.median(ms):.2f} | {p99:.2f} | {requests / wall:,.0f} | "
        f"{batch * requests / wall:,.0f} |",
        flush=True,
    )


def measure_local(path: Path, batch: int, requests: int) -> None:
    """The reference, in this process: the same observations through ``load_policy`` (the
    checkpoint's backend, PyTorch) and through ``NumpyPolicy`` (what the route runs), no HTTP."""
    from learners.exports import NumpyPolicy
    from learners.policy import load_policy

    rng = np.random.default_rng(batch)
    observations = {
        f"agent_{i}": rng.uniform(-1, 1, (batch, 18)).astype(np.float32) for i in range(3)
    }
    numpy_policy = NumpyPolicy.load(path)
    runs = (
        ("load_policy (torch)", load_policy(path).act),
        ("NumpyPolicy", lambda o: numpy_policy.act(o)[0]),
    )
    for name, act in runs:
        act(observations)
        latencies = []
        for _ in range(requests):
            started = time.perf_counter()
            act(observations)
            latencies.append(time.perf_counter() - started)
        ms = sorted(1000 * x for x in latencies)
        p99 = ms[min(len(ms) - 1, int(0.99 * len(ms)))]
        rate = requests / sum(latencies)
        print(
            f"| {batch:,} | in process, {name} | - | {statistics.median(ms):.2f} | {p99:.2f} | "
            f"{rate:,.0f} | {batch * rate:,.0f} |",
            flush=True,
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 1024])
    parser.add_argument("--port", type=int, default=8933)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="inference-latency-") as tmp:
        folder = Path(tmp)
        settings = Settings(
            var_dir=folder / "var",
            database_url=f"sqlite:///{folder / 'db.sqlite'}",
            broker_url="filesystem://",
        )
        experiment_id, checkpoint_id, key = prepare(settings, folder)
        api = start_api(settings, args.port, folder / "api.log")
        url = f"http://127.0.0.1:{args.port}/v1/experiments/{experiment_id}/checkpoints/{checkpoint_id}/act"
        try:
            print(f"MAPPO on simple_spread_v3 (3 agents x 18), {args.requests} requests each")
            print(
                "| batch | how | first request ms (loads the policy) | p50 ms | p99 ms | "
                "requests/s | observations/s |"
            )
            print("|---:|---:|---:|---:|---:|---:|---:|")
            for batch in args.batches:
                measure(url, key, batch, args.requests)
                measure_local(folder / "mappo.safetensors", batch, args.requests)
        finally:
            api.terminate()
            api.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
