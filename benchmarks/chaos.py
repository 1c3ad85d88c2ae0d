"""Faults, over and over, on a deployment of real processes: what recovery costs and whether it
changes the result.

    python benchmarks/chaos.py                      # the issue's scenario (about 25 minutes)
    python benchmarks/chaos.py --runs 6 --chaos-for 90 --redis-restarts 1 --db-cut 0  # shorter

Starts a deployment-like stack: a scratch PostgreSQL database on the local server
(``--database-url``, dropped at the end), a redis-server of its own on a free port (no
persistence), the API (``marlforge api``) and ``--workers`` torch workers (``marlforge worker
--backend torch``). ``--projects`` projects submit ``--runs`` small DDPG runs in all (different
seeds, checkpoints on episode boundaries), each project's share in one burst, the first project's
first. For ``--chaos-for`` seconds it then:

- SIGKILLs a random busy worker every ``--kill-every`` seconds and starts a fresh one in its place
  (what an orchestrator does with a preempted node);
- restarts Redis without its data ``--redis-restarts`` times (SIGKILL, then a new empty server on
  the same port: every waiting and taken message is gone);
- restarts the API ``--api-restarts`` times (SIGTERM, then a new process on the same port);
- cuts the database off for ``--db-cut`` seconds once (it refuses connections and loses those it
  has, as a failing-over server does).

Then it waits for every run to end, runs every spec again on the same stack with no faults, and
prints:

- runs stranded (not ended ``--settle`` seconds after the chaos), runs not ``succeeded``;
- metric points lost (a reference point the run lacks), doubled (a (step, name) twice) and
  different (a value unlike the reference's; ``perf/`` points, which time the machine, left out);
- runs whose final weights are bitwise equal to the uninterrupted run of the same spec;
- seconds from a kill to the killed worker's run running again (median and max), and the steps
  redone per recovery (estimated);
- each project's wait from submission to first start (median and max).

Workers are pinned to one framework thread each (``MARLFORGE_WORKER_THREADS=1``). The lease
(``--lease-ttl``) must outlast the database cut by a third: a run waits out a database outage for
three quarters of it (``workers.runs.job.DATABASE_PATIENCE``).
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
from learners import checkpoint  # noqa: E402
from tests.db_outage_support import Outage  # noqa: E402


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
    api_args: list[str] = field(default_factory=list)
    api: subprocess.Popen[bytes] | None = None
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    started: int = 0
    api_starts: int = 0

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

    def start_api(self) -> None:
        self.api_starts += 1
        self.api = self.spawn(self.api_args, f"api-{self.api_starts}")

    def restart_api(self) -> None:
        if self.api is not None:
            self.api.send_signal(signal.SIGTERM)
            self.api.wait(timeout=60)
        self.start_api()

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


def make_key(env: dict[str, str], project: str) -> str:
    done = subprocess.run(
        [*marlforge(), "keys", "create", "--project", project, "--role", "member"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1]


TERMINAL = {"succeeded", "failed", "cancelled"}


def wait_all(
    owners: dict[str, httpx.Client], ids: list[str], timeout: float
) -> dict[str, dict[str, Any]]:
    """Every run once all have ended, or as they are after ``timeout`` seconds (each read with a
    key of its project: ``owners``)."""
    deadline = time.monotonic() + timeout
    while True:
        runs = {i: read(owners[i], f"/v1/experiments/{i}") for i in ids}
        if all(r["status"] in TERMINAL for r in runs.values()) or time.monotonic() > deadline:
            return runs
        time.sleep(1.0)


def final_tensors(
    http: httpx.Client, experiment_id: str, folder: Path
) -> dict[str, np.ndarray[Any, Any]]:
    last = http.get(f"/v1/experiments/{experiment_id}/checkpoints").json()["items"][-1]
    path = folder / f"{experiment_id}.ckpt"
    url = f"/v1/experiments/{experiment_id}/checkpoints/{last['id']}/file"
    path.write_bytes(http.get(url).content)
    return checkpoint.read(path)[0]


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


class Faults:
    """The scheduled faults of the chaos phase, and what each did."""

    def __init__(
        self, stack: Stack, redis: RedisServer, database: Outage, args: argparse.Namespace
    ) -> None:
        self.stack, self.redis, self.database, self.args = stack, redis, database, args
        self.log: list[str] = []

    def schedule(self) -> list[tuple[float, str]]:
        """(seconds into the chaos, fault) for every fault but the worker kills."""
        span = self.args.chaos_for
        plan = [((k + 1) * span / (self.args.redis_restarts + 1.5), "redis")
                for k in range(self.args.redis_restarts)]  # fmt: skip
        plan += [((k + 0.7) * span / (self.args.api_restarts + 1), "api")
                 for k in range(self.args.api_restarts)]  # fmt: skip
        if self.args.db_cut > 0:
            plan.append((0.8 * span, "database"))
        return sorted(plan)

    def run(self, fault: str, http: httpx.Client) -> None:
        started = time.monotonic()
        if fault == "redis":
            self.redis.restart_empty()
            what = "Redis restarted without its data"
        elif fault == "api":
            self.stack.restart_api()
            wait_ready(http)
            what = "API restarted"
        else:
            self.database.start()
            time.sleep(self.args.db_cut)
            self.database.end()
            what = f"database cut off for {self.args.db_cut:g} s"
        self.log.append(what)
        print(f"  {what} ({time.monotonic() - started:.1f} s)", flush=True)


class RedisServer:
    """The broker: a redis-server without persistence, which ``restart_empty`` kills and starts
    again on the same port, empty."""

    def __init__(self) -> None:
        self.port = free_port()
        self.process = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [shutil.which("redis-server") or "redis-server", "--port", str(self.port),
             "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip

    def restart_empty(self) -> None:
        self.process.kill()
        self.process.wait()
        self.process = self._start()
        time.sleep(0.5)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


def read(http: httpx.Client, path: str, **params: Any) -> Any:
    """GET ``path``'s JSON, waiting out an API that restarts or a database that is away."""
    deadline = time.monotonic() + 180
    while True:
        try:
            response = http.get(path, params=params)
            if response.status_code < 500:
                response.raise_for_status()
                return response.json()
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"GET {path} failed for 180 s")
        time.sleep(0.5)


def chaos(
    stack: Stack,
    owners: dict[str, httpx.Client],
    ids: list[str],
    faults: Faults,
    args: argparse.Namespace,
) -> tuple[list[float], list[float]]:
    """Kill a random busy worker every ``kill_every`` s and run the scheduled faults; return the
    seconds from each kill to its run running again, and the steps each kill made its run redo
    (estimated)."""
    rng = random.Random(args.seed)
    recoveries: list[float] = []
    redone: list[float] = []
    # run id -> (restarts before the kill, when it was killed)
    watching: dict[str, tuple[int, float]] = {}
    start = time.monotonic()
    plan = faults.schedule()
    next_kill = start + args.kill_every
    while time.monotonic() < start + args.chaos_for:
        now = time.monotonic()
        if plan and now - start >= plan[0][0]:
            faults.run(plan.pop(0)[1], owners[ids[0]])
        if now >= next_kill:
            next_kill = now + args.kill_every
            runs = [read(owners[i], f"/v1/experiments/{i}") for i in ids]
            held = {
                r["worker"]["id"]: r
                for r in runs
                if r["status"] == "running" and r["worker"] is not None
            }
            busy = [name for name in stack.workers if name in held]
            if busy:
                victim = rng.choice(busy)
                run = held[victim]
                redone.append(steps_since_checkpoint(owners[run["id"]], run))
                stack.kill_worker(victim)
                stack.start_worker()
                watching[run["id"]] = (run["restarts"], time.monotonic())
                print(f"  killed {victim} holding {run['id']} at step "
                      f"{run['progress']['step']:,}", flush=True)  # fmt: skip
        for run_id, (restarts, killed_at) in list(watching.items()):
            body = read(owners[run_id], f"/v1/experiments/{run_id}")
            if body["restarts"] > restarts and body["status"] in {"running", "succeeded"}:
                recoveries.append(time.monotonic() - killed_at)
                del watching[run_id]
            elif body["status"] in {"failed", "cancelled"}:
                print(f"  {run_id} {body['status']}: {body['status_reason']}", flush=True)
                del watching[run_id]
        time.sleep(0.5)
    return recoveries, redone


def metric_points(http: httpx.Client, experiment_id: str) -> list[tuple[int, str, float | None]]:
    """Every metric point of the run, page by page: (step, name, value)."""
    points: list[tuple[int, str, float | None]] = []
    after: int | None = None
    while True:
        params: dict[str, Any] = {"limit": 10000}
        if after is not None:
            params["after_step"] = after
        page = read(http, f"/v1/experiments/{experiment_id}/metrics", **params)
        points += [(p["step"], p["name"], p["value"]) for p in page["items"]]
        after = page["next_after_step"]
        if after is None:
            return points


def compare_points(
    run: list[tuple[int, str, float | None]], reference: list[tuple[int, str, float | None]]
) -> tuple[int, int, int]:
    """(lost, doubled, different) points of ``run`` against ``reference``, ``perf/`` left out."""
    keys = [(s, n) for s, n, _ in run if not n.startswith("perf/")]
    doubled = len(keys) - len(set(keys))
    mine = {(s, n): v for s, n, v in run if not n.startswith("perf/")}
    theirs = {(s, n): v for s, n, v in reference if not n.startswith("perf/")}
    lost = len(theirs.keys() - mine.keys())
    different = sum(mine[k] != v for k, v in theirs.items() if k in mine)
    return lost, doubled, different


def waits(runs: list[dict[str, Any]]) -> list[float]:
    """Seconds from each run's submission to its first start."""
    return [
        (
            dt.datetime.fromisoformat(r["started_at"]) - dt.datetime.fromisoformat(r["created_at"])
        ).total_seconds()
        for r in runs
        if r["started_at"] is not None
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--projects", type=int, default=2)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--total-steps", type=int, default=1600)
    parser.add_argument("--kill-every", type=float, default=40.0)
    parser.add_argument("--chaos-for", type=float, default=600.0)
    parser.add_argument("--redis-restarts", type=int, default=2)
    parser.add_argument("--api-restarts", type=int, default=1)
    parser.add_argument("--db-cut", type=float, default=20.0, help="seconds; 0: no cut")
    parser.add_argument("--lease-ttl", type=float, default=30.0)
    parser.add_argument("--settle", type=float, default=900.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--database-url",
        default=os.environ.get(
            "MARLFORGE_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
        ),
        help="a PostgreSQL server; a scratch database is created on it and dropped at the end",
    )
    args = parser.parse_args()
    if args.db_cut > 0 and args.db_cut >= 0.75 * args.lease_ttl:
        raise SystemExit("--lease-ttl must be more than --db-cut / 0.75 (see the docstring)")

    base = make_url(args.database_url)
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    name = f"marlforge_chaos_{secrets.token_hex(4)}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    database_url = base.set(database=name).render_as_string(hide_password=False)
    folder = Path(tempfile.mkdtemp(prefix="marlforge-chaos-"))
    redis = RedisServer()
    api_port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MARLFORGE_")},
        "MARLFORGE_DATABASE_URL": database_url,
        "MARLFORGE_BROKER_URL": f"redis://127.0.0.1:{redis.port}/0",
        "MARLFORGE_VAR_DIR": str(folder / "var"),
        "MARLFORGE_ARTIFACTS_DIR": str(folder / "artifacts"),
        "MARLFORGE_LEASE_TTL_S": str(args.lease_ttl),
        "MARLFORGE_REAPER_INTERVAL_S": "1",
        "MARLFORGE_RECONCILE_INTERVAL_S": "5",
        "MARLFORGE_DISPATCH_GRACE_S": "10",
        "MARLFORGE_WORKER_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    stack = Stack(folder, env, api_args=["api", "--host", "127.0.0.1", "--port", str(api_port)])
    try:
        migrate.upgrade(database_url)
        stack.start_api()
        for _ in range(args.workers):
            stack.start_worker()
        projects = [f"chaos-{chr(ord('a') + k)}" for k in range(args.projects)]
        clients = {
            p: httpx.Client(
                base_url=f"http://127.0.0.1:{api_port}",
                headers={"authorization": f"Bearer {make_key(env, p)}"},
                timeout=30,
            )
            for p in projects
        }
        http = clients[projects[0]]
        wait_ready(http)
        specs = {p: [] for p in projects}  # type: dict[str, list[dict[str, Any]]]
        for seed in range(args.runs):
            specs[projects[seed % args.projects]].append(spec_for(seed, args.total_steps))
        ids = {p: [submit(clients[p], s) for s in specs[p]] for p in projects}
        every = [i for p in projects for i in ids[p]]
        owners = {i: clients[p] for p in projects for i in ids[p]}
        print(f"chaos: {args.runs} DDPG runs of {args.total_steps:,} steps from {args.projects} "
              f"projects, {args.workers} workers, a kill every {args.kill_every:g} s, "
              f"{args.redis_restarts} Redis restarts without data, {args.api_restarts} API "
              f"restarts, a {args.db_cut:g} s database cut, for {args.chaos_for:g} s; lease "
              f"{args.lease_ttl:g} s", flush=True)  # fmt: skip
        faults = Faults(stack, redis, Outage(database_url), args)
        recoveries, redone = chaos(stack, owners, every, faults, args)
        runs = wait_all(owners, every, timeout=args.settle)
        stranded = [i for i, r in runs.items() if r["status"] not in TERMINAL]
        print("reference: the same specs again, no faults", flush=True)
        references = {
            i: submit(clients[p], {**s, "name": f"{s['name']}-reference"})
            for p in projects
            for i, s in zip(ids[p], specs[p], strict=True)
        }
        owners.update({r: owners[i] for i, r in references.items()})
        wait_all(owners, list(references.values()), timeout=3600)
        lost = doubled = different = equal = 0
        for run_id, reference in references.items():
            http = owners[run_id]
            counts = compare_points(metric_points(http, run_id), metric_points(http, reference))
            lost, doubled, different = (
                a + b for a, b in zip((lost, doubled, different), counts, strict=True)
            )
            equal += runs[run_id]["status"] == "succeeded" and all(
                np.array_equal(a, b)
                for a, b in zip(
                    final_tensors(http, run_id, folder).values(),
                    final_tensors(http, reference, folder).values(),
                    strict=True,
                )
            )
        failed = sum(r["status"] != "succeeded" for r in runs.values())
        recovered = sum(r["restarts"] > 0 and r["status"] == "succeeded" for r in runs.values())
        print(f"faults: {len(recoveries)} worker kills recovered; {'; '.join(faults.log)}")
        print(f"runs stranded: {len(stranded)}; runs not succeeded: {failed} of {args.runs}; "
              f"runs taken over and succeeded: {recovered}")  # fmt: skip
        print(f"metric points lost: {lost}, doubled: {doubled}, different: {different}")
        print(f"final weights bitwise equal to the uninterrupted run: {equal} of {args.runs}")
        if recoveries:
            print(f"kill -> running again: median {statistics.median(recoveries):.1f} s, "
                  f"max {max(recoveries):.1f} s (lease {args.lease_ttl:g} s)")  # fmt: skip
        if redone:
            print(f"steps redone per recovery (estimated): median "
                  f"{statistics.median(redone):,.0f}, max {max(redone):,.0f}")  # fmt: skip
        for p in projects:
            seconds = waits([runs[i] for i in ids[p]])
            if seconds:
                print(f"{p}: {len(ids[p])} runs, wait from submission to first start: median "
                      f"{statistics.median(seconds):.1f} s, max {max(seconds):.1f} s")  # fmt: skip
    finally:
        stack.stop()
        redis.stop()
        with admin.connect() as connection:
            connection.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true'))
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
        shutil.rmtree(folder, ignore_errors=True)


def submit(http: httpx.Client, spec: dict[str, Any]) -> str:
    response = http.post("/v1/experiments", json=spec)
    if response.status_code != 201:
        raise SystemExit(f"submission refused: {response.status_code} {response.text}")
    run_id: str = response.json()["id"]
    return run_id


if __name__ == "__main__":
    main()
