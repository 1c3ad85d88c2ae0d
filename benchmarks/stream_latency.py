"""Streaming latency: time from a metric batch's commit to its arrival at many SSE clients.

    python benchmarks/stream_latency.py --clients 100 --batches 50 --modes redis embedded

For each mode, the API runs as its own process (``marlforge api``, as deployed) and a writer process
plays a worker: it reports metric batches through the worker's own ``DatabaseHooks`` and notes the
wall-clock time each commit returned. ``--clients`` SSE clients in this process follow the run's
stream and note when each batch arrives. Printed: median, p99 and max of (arrival - commit) over
every (client, batch).

- ``redis``: PostgreSQL (``MARLFORGE_DATABASE_URL`` or the local test server; a scratch database is
  created and dropped) and Redis as the broker (``MARLFORGE_BROKER_URL`` or the local one): streams
  are woken by Redis pub/sub.
- ``embedded``: the laptop defaults, SQLite and no Redis: streams are woken by the API polling the
  database (every 0.25 s).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.settings import Settings  # noqa: E402

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DEFAULT_REDIS = "redis://127.0.0.1:6379/0"
METRIC = "bench/sequence"


@dataclass(frozen=True)
class Mode:
    """Where the service keeps its state in one benchmark mode."""

    name: str
    database_url: str
    broker_url: str


@contextlib.contextmanager
def scratch_postgres() -> Iterator[str]:
    """A new database on the PostgreSQL server, dropped afterwards."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    base = os.environ.get("MARLFORGE_DATABASE_URL", "")
    base = base if base.startswith("postgresql") else DEFAULT_PG
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    name = f"marlforge_bench_{secrets.token_hex(4)}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(base).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def prepare(settings: Settings) -> str:
    """Migrate, submit one experiment and mark it running; returns its id."""
    from core import migrate
    from core.db import make_engine, make_session_factory
    from core.dispatch.queue import CeleryDispatcher
    from core.enums import ExperimentStatus as S
    from core.experiments import service as experiments
    from core.lifecycle import transition
    from learners.admission.parse import parse_spec

    migrate.upgrade(settings.database_url)
    engine = make_engine(settings.database_url)
    spec = {
        "name": "latency",
        "algorithm": "ddpg",
        "backend": "torch",
        "total_steps": 10**9,
        "env": {"suite": "gymnasium", "id": "Pendulum-v1"},
    }
    with make_session_factory(engine)() as session:
        experiment = experiments.submit(session, CeleryDispatcher(settings), parse_spec(spec))
        transition(session, experiment.id, [S.QUEUED], S.RUNNING, "benchmark")
        session.commit()
    engine.dispose()
    return experiment.id


def write_batches(
    settings: Settings,
    experiment_id: str,
    batches: int,
    interval_s: float,
    out: multiprocessing.Queue,
) -> None:  # type: ignore[type-arg]
    """The "worker": one metric batch per ``interval_s`` through ``DatabaseHooks``; sends
    {sequence: commit time}, then finishes the run."""
    from core.db import make_engine, make_session_factory
    from core.enums import ExperimentStatus as S
    from core.lifecycle import transition
    from core.storage import store_for
    from core.streaming import publish_after_commit, publisher_for
    from learners.hooks import MetricPoint
    from workers.runs.hooks import DatabaseHooks

    sessions = make_session_factory(make_engine(settings.database_url))
    publish_after_commit(sessions, publisher_for(settings))
    hooks = DatabaseHooks(
        experiment_id,
        sessions,
        store_for(settings),
        keep_last=1,
        total_steps=10**9,
        poll_interval_s=3600,
        time_limit_s=3600,
    )
    committed: dict[int, float] = {}
    for sequence in range(batches):
        hooks.metrics([MetricPoint(sequence + 1, time.time(), METRIC, float(sequence))])
        hooks.flush()
        committed[sequence] = time.time()
        time.sleep(interval_s)
    with sessions() as session:
        transition(session, experiment_id, [S.RUNNING], S.SUCCEEDED, None)
        session.commit()
    out.put(committed)


class Gate:
    """Opens once ``count`` clients have their stream open."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.opened = asyncio.Event()

    def arrive(self) -> None:
        self.count -= 1
        if self.count <= 0:
            self.opened.set()


async def follow(port: int, experiment_id: str, gate: Gate) -> dict[int, float]:
    """One SSE client: {sequence: arrival time} until ``end``."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"GET /v1/experiments/{experiment_id}/events?kinds=metrics,status HTTP/1.1\r\n"
        f"Host: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    await writer.drain()
    arrivals: dict[int, float] = {}
    event = ""
    while line := (await reader.readline()).decode():
        line = line.rstrip("\r\n")
        if line.startswith("retry:"):
            gate.arrive()
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:") and event == "metrics":
            now = time.time()
            for point in json.loads(line[5:])["points"]:
                arrivals[int(point["value"])] = now
        elif line.startswith("data:") and event == "end":
            break
    writer.close()
    return arrivals


async def measure(
    port: int, experiment_id: str, settings: Settings, clients: int, batches: int, interval_s: float
) -> list[float]:
    gate = Gate(clients)
    followers = [asyncio.create_task(follow(port, experiment_id, gate)) for _ in range(clients)]
    await asyncio.wait_for(gate.opened.wait(), 60)
    await asyncio.sleep(1.0)  # let every stream read its history and start waiting
    spawn = multiprocessing.get_context("spawn")
    results = spawn.Queue()
    writer = spawn.Process(
        target=write_batches, args=(settings, experiment_id, batches, interval_s, results)
    )
    writer.start()
    arrivals = await asyncio.wait_for(asyncio.gather(*followers), batches * interval_s + 120)
    committed: dict[int, float] = results.get(timeout=60)
    writer.join()
    latencies = [got[seq] - committed[seq] for got in arrivals for seq in committed]
    missing = clients * batches - len(latencies)
    if missing:
        raise RuntimeError(f"{missing} (client, batch) pairs never arrived")
    return latencies


def start_api(settings: Settings, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARLFORGE_")}
    env.update(
        {
            "MARLFORGE_DATABASE_URL": settings.database_url,
            "MARLFORGE_BROKER_URL": settings.broker_url,
            "MARLFORGE_QUEUE_PREFIX": settings.queue_prefix,
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


def run_mode(mode: Mode, folder: Path, args: argparse.Namespace) -> list[float]:
    settings = Settings(
        var_dir=folder / mode.name,
        database_url=mode.database_url,
        broker_url=mode.broker_url,
        queue_prefix=f"bench-{secrets.token_hex(3)}.",
    )
    experiment_id = prepare(settings)
    port = args.port
    api = start_api(settings, port, folder / f"api-{mode.name}.log")
    try:
        return asyncio.run(
            measure(port, experiment_id, settings, args.clients, args.batches, args.interval)
        )
    finally:
        api.terminate()
        api.wait(timeout=30)
        if mode.broker_url.startswith("redis"):
            import redis

            client = redis.Redis.from_url(mode.broker_url)
            for key in client.scan_iter(match=f"*{settings.queue_prefix}*"):
                client.delete(key)


def report(name: str, latencies: list[float]) -> None:
    ms = sorted(1000 * x for x in latencies)
    p99 = ms[min(len(ms) - 1, int(0.99 * len(ms)))]
    print(
        f"{name:<10} samples={len(ms):>6}  median={statistics.median(ms):7.1f} ms  "
        f"p99={p99:7.1f} ms  max={ms[-1]:7.1f} ms",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--batches", type=int, default=50, help="metric batches the run writes")
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between batches")
    parser.add_argument(
        "--modes", nargs="+", default=["redis", "embedded"], choices=["redis", "embedded"]
    )
    parser.add_argument("--port", type=int, default=8931)
    args = parser.parse_args()
    redis_url = os.environ.get("MARLFORGE_BROKER_URL", "")
    redis_url = redis_url if redis_url.startswith("redis") else DEFAULT_REDIS
    print(f"{args.clients} SSE clients, {args.batches} batches every {args.interval} s")
    with tempfile.TemporaryDirectory(prefix="stream-latency-") as tmp:
        folder = Path(tmp)
        for name in args.modes:
            if name == "redis":
                with scratch_postgres() as url:
                    report(name, run_mode(Mode(name, url, redis_url), folder, args))
            else:
                sqlite = f"sqlite:///{folder / 'embedded.db'}"
                report(name, run_mode(Mode(name, sqlite, "filesystem://"), folder, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
