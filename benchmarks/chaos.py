"""Lost workers, over and over: what recovery costs and whether it changes the result.

    python benchmarks/chaos.py --runs 4 --kill-every 8 --chaos-for 60 --lease-ttl 10

Starts a deployment-like stack of real processes: a scratch PostgreSQL database on the local
server (``--database-url``, dropped at the end), a redis-server of its own on a free port, the API
(``marlforge api``) and two torch workers (``marlforge worker --backend torch``). It submits
``--runs`` small DDPG runs (different seeds, checkpoints on episode boundaries) and, for
``--chaos-for`` seconds, SIGKILLs a random worker every ``--kill-every`` seconds and starts a
fresh one in its place (what an orchestrator does with a preempted node). Then it runs every spec
again on the same stack with no kills, and prints:

- runs recovered (taken over at least once and then succeeded) and runs that failed;
- seconds from a kill to each of the killed worker's runs running again (median and max);
- steps redone per recovery (trained since the latest checkpoint when the worker was killed,
  estimated from the time since that checkpoint and the run's speed);
- runs whose final weights are bitwise equal to the uninterrupted run of the same spec.

Workers are pinned to one framework thread each (``MARLFORGE_WORKER_THREADS=1``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core import migrate  # noqa: E402
from learners.checkpoint import read  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def marlforge() -> list[str]:
    script = Path(sys.executable).with_name("marlforge")
    return [str(script)] if script.exists() else [sys.executable, "-m", "marlforge"]


@dataclass
class Stack:
    """The processes of the benchmark's deployment."""

    folder: Path
    env: dict[str, str]
    api_url: str = ""
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    started: int = 0

    def spawn(self, args: list[str], name: str, extra: dict[str, str] | None = None) -> Any:
        log = (self.folder / f"{name}.log").open("wb")
        process = subprocess.Popen(
            [*marlforge(), *args],
            env={**self.env, **(extra or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes.append(process)
        return process

    def start_worker(self) -> str:
        self.started += 1
        name = f"chaos-w{self.started}"
        self.workers[name] = self.spawn(
            ["worker", "--backend", "torch"], name, {"MARLFORGE_WORKER_NAME": name}
        )
        return name

    def kill_worker(self, name: str) -> None:
        process = self.workers.pop(name)
        process.send_signal(signal.SIGKILL)
        process.wait()

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


def spec_for(seed: int, total_steps: int) -> dict[str, Any]:
    # Pendulum's episodes are 200 steps on each of 2 copies: checkpoints every 400 steps fall on
    # episode boundaries, where a resume is exact.
    return {
        "name": f"chaos-{seed}",
        "algorithm": "ddpg",
        "backend": "torch",
        "env": {"suite": "gymnasium", "id": "Pendulum-v1", "num_envs": 2},
        "total_steps": total_steps,
        "seed": seed,
        "hyperparameters": {
            "learning_starts": 64,
            "batch_size": 32,
            "hidden_sizes": [32, 32],
            "buffer_size": 10000,
        },
        "evaluation": {"every_steps": 2000, "episodes": 1},
        "checkpoint": {"every_steps": 400, "keep_last": 2},
    }


def wait_ready(http: httpx.Client, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if http.get("/readyz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.25)
    raise SystemExit("the API did not become ready")


def make_key(env: dict[str, str]) -> str:
    done = subprocess.run(
        [*marlforge(), "keys", "create", "--project", "chaos", "--role", "member"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1]


def wait_all(http: httpx.Client, ids: list[str], timeout: float) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        runs = {i: http.get(f"/v1/experiments/{i}").json() for i in ids}
        if all(r["status"] in {"succeeded", "failed", "cancelled"} for r in runs.values()):
            return runs
        if time.monotonic() > deadline:
            raise SystemExit(f"runs still going after {timeout:.0f} s")
        time.sleep(1.0)


def final_tensors(
    http: httpx.Client, experiment_id: str, folder: Path
) -> dict[str, np.ndarray[Any, Any]]:
    last = http.get(f"/v1/experiments/{experiment_id}/checkpoints").json()["items"][-1]
    path = folder / f"{experiment_id}.ckpt"
    url = f"/v1/experiments/{experiment_id}/checkpoints/{last['id']}/file"
    path.write_bytes(http.get(url).content)
    return read(path)[0]


def steps_since_checkpoint(http: httpx.Client, run: dict[str, Any]) -> float:
    """The steps a run has trained since its latest checkpoint, now: what a kill now makes it
    redo. The API's step moves only every 1,000 steps, so it is estimated from the time since the
    checkpoint and the run's last reported speed."""
    checkpoints = http.get(f"/v1/experiments/{run['id']}/checkpoints").json()["items"]
    speed = (run["latest_metrics"].get("perf/steps_per_second") or {}).get("value") or 0.0
    if not checkpoints:
        return float(run["progress"]["step"])
    since = dt.datetime.now(dt.UTC) - dt.datetime.fromisoformat(checkpoints[-1]["created_at"])
    interval = run["spec"]["checkpoint"]["every_steps"]
    return float(min(interval, since.total_seconds() * speed))


def chaos(
    stack: Stack, http: httpx.Client, ids: list[str], args: argparse.Namespace
) -> tuple[list[float], list[float]]:
    """Kill a random busy worker every ``kill_every`` s; return the seconds from each kill to its
    run running again, and the steps each kill made its run redo (estimated)."""
    rng = random.Random(args.seed)
    recoveries: list[float] = []
    redone: list[float] = []
    end = time.monotonic() + args.chaos_for
    while time.monotonic() < end:
        time.sleep(args.kill_every)
        runs = [http.get(f"/v1/experiments/{i}").json() for i in ids]
        held = {
            r["worker"]["id"]: r
            for r in runs
            if r["status"] == "running" and r["worker"] is not None
        }
        busy = [name for name in stack.workers if name in held]
        if not busy:
            continue
        victim = rng.choice(busy)
        run = held[victim]
        redone.append(steps_since_checkpoint(http, run))
        killed_at = time.monotonic()
        stack.kill_worker(victim)
        stack.start_worker()
        outcome = "never ran again"
        while time.monotonic() - killed_at < 600:
            body = http.get(f"/v1/experiments/{run['id']}").json()
            if body["restarts"] > run["restarts"] and body["status"] in {"running", "succeeded"}:
                recoveries.append(time.monotonic() - killed_at)
                outcome = f"running again after {recoveries[-1]:.1f} s"
                break
            if body["status"] == "failed":
                outcome = f"failed: {body['status_reason']}"
                break
            time.sleep(0.2)
        step = run["progress"]["step"]
        print(f"  killed {victim} holding {run['id']} at step {step:,}; {outcome}", flush=True)
    return recoveries, redone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--total-steps", type=int, default=8000)
    parser.add_argument("--kill-every", type=float, default=8.0)
    parser.add_argument("--chaos-for", type=float, default=60.0)
    parser.add_argument("--lease-ttl", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--database-url",
        default=os.environ.get(
            "MARLFORGE_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
        ),
        help="a PostgreSQL server; a scratch database is created on it and dropped at the end",
    )
    args = parser.parse_args()

    base = make_url(args.database_url)
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    name = f"marlforge_chaos_{secrets.token_hex(4)}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    database_url = base.set(database=name).render_as_string(hide_password=False)
    folder = Path(tempfile.mkdtemp(prefix="marlforge-chaos-"))
    redis_port = free_port()
    redis = subprocess.Popen(
        [shutil.which("redis-server") or "redis-server", "--port", str(redis_port),
         "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    api_port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MARLFORGE_")},
        "MARLFORGE_DATABASE_URL": database_url,
        "MARLFORGE_BROKER_URL": f"redis://127.0.0.1:{redis_port}/0",
        "MARLFORGE_VAR_DIR": str(folder / "var"),
        "MARLFORGE_ARTIFACTS_DIR": str(folder / "artifacts"),
        "MARLFORGE_LEASE_TTL_S": str(args.lease_ttl),
        "MARLFORGE_REAPER_INTERVAL_S": "1",
        "MARLFORGE_WORKER_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    stack = Stack(folder, env)
    try:
        migrate.upgrade(database_url)
        stack.spawn(["api", "--host", "127.0.0.1", "--port", str(api_port)], "api")
        stack.start_worker()
        stack.start_worker()
        http = httpx.Client(
            base_url=f"http://127.0.0.1:{api_port}",
            headers={"authorization": f"Bearer {make_key(env)}"},
            timeout=30,
        )
        wait_ready(http)
        specs = [spec_for(seed, args.total_steps) for seed in range(args.runs)]
        ids = [http.post("/v1/experiments", json=s).json()["id"] for s in specs]
        print(f"chaos: {args.runs} DDPG runs of {args.total_steps:,} steps, 2 workers, a kill "
              f"every {args.kill_every:g} s for {args.chaos_for:g} s, lease {args.lease_ttl:g} s",
              flush=True)  # fmt: skip
        recoveries, redone = chaos(stack, http, ids, args)
        runs = wait_all(http, ids, timeout=1800)
        print("reference: the same specs again, no kills", flush=True)
        references = [
            http.post("/v1/experiments", json={**s, "name": f"{s['name']}-reference"}).json()["id"]
            for s in specs
        ]
        wait_all(http, references, timeout=1800)
        equal = sum(
            runs[i]["status"] == "succeeded"
            and all(
                np.array_equal(a, b)
                for a, b in zip(
                    final_tensors(http, i, folder).values(),
                    final_tensors(http, r, folder).values(),
                    strict=True,
                )
            )
            for i, r in zip(ids, references, strict=True)
        )
        recovered = sum(r["restarts"] > 0 and r["status"] == "succeeded" for r in runs.values())
        failed = sum(r["status"] != "succeeded" for r in runs.values())
        print(f"kills: {len(recoveries)}; runs recovered: {recovered} of {args.runs}; "
              f"runs not succeeded: {failed}")  # fmt: skip
        if recoveries:
            print(f"kill -> running again: median {statistics.median(recoveries):.1f} s, "
                  f"max {max(recoveries):.1f} s (lease {args.lease_ttl:g} s)")  # fmt: skip
        if redone:
            print(f"steps redone per recovery (estimated): median "
                  f"{statistics.median(redone):,.0f}, max {max(redone):,.0f}")  # fmt: skip
        print(f"final weights bitwise equal to the uninterrupted run: {equal} of {args.runs}")
    finally:
        stack.stop()
        redis.kill()
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
