"""What the API's reads cost on a big database: lists, pages and charts of a run with millions of
points, timed against a real ``marlforge api`` process.

    python benchmarks/metrics_scale.py --points 1000000                    # SQLite
    python benchmarks/metrics_scale.py --points 10000000 \\
        --database-url postgresql+psycopg://postgres@127.0.0.1:5432/marlforge_bench

Fills the database (migrated by ``marlforge migrate``) with ``--experiments`` experiments of the
project ``metrics-scale`` and, as the newest of them, one run of 10 series that hold ``--points``
points in all, stored step by step as a worker stores them: a triangle wave with noise, a spike
and a non-finite value every 100 003 steps. Filling runs in the database (``generate_series`` on
PostgreSQL, a recursive query on SQLite), a million rows a statement, and is skipped when a run of
that size is already there, so a second run of the script only measures. PostgreSQL: the database
is created when missing; the suite's shared ``test`` database and any database with experiments
outside ``metrics-scale`` are refused.

The run's summaries (``metric_tiers``) are written from its points after the fill, as the
migration that added them does (``TierRepository.rebuild``).

Then starts ``marlforge api`` with a viewer key (``marlforge keys create``), sends each request
once to warm up and ``--requests`` times more, and prints the median, 95th percentile and slowest
latency and the API process's peak resident memory during them (Linux: VmHWM, reset before each
request kind). ``--against DIR`` starts the API of another checkout too (a worktree of an earlier
commit: ``git worktree add /tmp/before <commit>``) on the same database, and times its requests in
the same run, alternating request kinds between the two; the other checkout's code does not migrate
(the database is this checkout's).

``--writes N`` times N reports written the way a worker writes them (every series at one new step
after the run's last, ``MetricRepository.write``: the points and their summaries) against the same
statements without the summaries (the points' upsert alone), in a transaction rolled back after.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from sqlalchemy import Engine, create_engine, delete, func, insert, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core import auth  # noqa: E402
from core.db import make_engine, make_session_factory  # noqa: E402
from core.dispatch.queue import CeleryDispatcher  # noqa: E402
from core.enums import ExperimentStatus  # noqa: E402
from core.experiments import service as experiments  # noqa: E402
from core.ids import new_id  # noqa: E402
from core.metrics.repository import (  # noqa: E402
    MetricRepository,
    MetricWrite,
    _upsert,  # noqa: E402
)
from core.metrics.tier_repository import TierRepository  # noqa: E402
from core.models import Experiment, MetricPointRow, MetricTierRow  # noqa: E402
from core.settings import Settings  # noqa: E402
from learners.admission.parse import parse_spec  # noqa: E402
from learners.spec import ExperimentSpec  # noqa: E402

PROJECT = "metrics-scale"
SERIES = [f"bench/metric_{k:02d}" for k in range(10)]
CHUNK_STEPS = 100_000
"""Steps per filling statement: 10 series x 100 000 steps = a million rows."""
REFUSED = {"test", "postgres", "template0", "template1"}
EXAMPLE_SPEC = ROOT / "examples" / "ddpg_pendulum.json"

# Integer arithmetic only, so SQLite needs no math functions: a triangle wave per series plus
# noise, one spike, and NULL (a non-finite value) every 100 003 steps.
VALUE = """CASE WHEN s % 100003 = 7 THEN NULL
     WHEN s = 123457 THEN 1000.0
     ELSE abs((s + k * 1000) % 20000 - 10000) / 10000.0 + ((s * 7919 + k * 104729) % 1000) / 10000.0
END"""
FILL = {
    "postgresql": f"""
INSERT INTO metric_points (experiment_id, step, name, value, wall_time)
SELECT :run, s * 10, n.name, {VALUE}, 1.7e9 + s * 0.01
FROM generate_series(CAST(:start AS bigint), :stop) AS s,
     unnest(CAST(:names AS text[])) WITH ORDINALITY AS n(name, k)
ORDER BY s, n.k""",
    "sqlite": f"""
WITH RECURSIVE steps(s) AS (SELECT :start UNION ALL SELECT s + 1 FROM steps WHERE s < :stop),
     series(k, name) AS (SELECT key + 1, value FROM json_each(:names_json))
INSERT INTO metric_points (experiment_id, step, name, value, wall_time)
SELECT :run, s * 10, name, {VALUE}, 1.7e9 + s * 0.01
FROM steps CROSS JOIN series""",
}


def database_url(given: str | None, points: int) -> str:
    url = given or os.environ.get("MARLFORGE_DATABASE_URL", "")
    if not url:
        folder = Path(tempfile.gettempdir()) / "marlforge-metrics-scale"
        return f"sqlite:///{folder / f'sqlite-{points}.db'}"
    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql":
        if parsed.database in REFUSED:
            raise SystemExit(f"refusing to fill the shared database {parsed.database!r}")
        admin = create_engine(parsed.set(database="postgres"), isolation_level="AUTOCOMMIT")
        with admin.connect() as connection:
            exists = connection.scalar(
                text("SELECT 1 FROM pg_database WHERE datname = :name"), {"name": parsed.database}
            )
            if not exists:
                connection.execute(text(f'CREATE DATABASE "{parsed.database}"'))
        admin.dispose()
    return url


def cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "marlforge", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"marlforge {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def fill(engine: Engine, settings: Settings, count: int, points: int) -> tuple[str, float]:
    """The run of ``points`` points (filled when missing) and the seconds filling took."""
    started = time.monotonic()
    run_name = f"metrics-scale-{points}"
    with make_session_factory(engine)() as session:
        project = auth.ensure_project(session, PROJECT)
        outside = session.scalar(
            select(func.count()).select_from(Experiment).where(Experiment.project_id != project.id)
        )
        if outside:
            raise SystemExit(f"the database holds {outside} experiments of other projects")
        spec = parse_spec(json.loads(EXAMPLE_SPEC.read_text()))
        run = session.scalar(select(Experiment).where(Experiment.name == run_name))
        have = session.scalar(select(func.count()).where(Experiment.project_id == project.id))
        # The run is the newest experiment; the others are copies of one more (the template).
        missing = count - (have or 0) - (run is None)
        if missing > 0:
            _experiments(session, settings, spec, project.id, missing - 1)
        if run is not None and points == session.scalar(
            select(func.count()).where(MetricPointRow.experiment_id == run.id)
        ):
            if (
                session.scalar(
                    select(MetricTierRow.tier).where(MetricTierRow.experiment_id == run.id).limit(1)
                )
                is None
            ):
                _tiers(session, run.id)
                return run.id, time.monotonic() - started
            return run.id, 0.0
        if run is None:
            named = spec.model_copy(update={"name": run_name})
            run = experiments.submit(session, CeleryDispatcher(settings), named, project.id)
            run.status = ExperimentStatus.SUCCEEDED
            session.commit()
        _points(session, engine.dialect.name, run.id, points)
        _tiers(session, run.id)
        return run.id, time.monotonic() - started


def _tiers(session: Session, run_id: str) -> None:
    """The run's summaries, written from its points."""
    started = time.monotonic()
    TierRepository(session).rebuild(run_id, SERIES)
    session.commit()
    # A rebuild deletes and writes its upper tiers' rows once per stretch: vacuum them away, as
    # autovacuum would on a running service (PostgreSQL runs VACUUM outside a transaction).
    bind = session.get_bind()
    if bind.dialect.name == "postgresql":
        with bind.connect() as connection:
            connection.execution_options(isolation_level="AUTOCOMMIT")
            connection.execute(text("VACUUM ANALYZE metric_tiers"))
    else:
        session.execute(text("ANALYZE"))
        session.commit()
    print(f"  summarised in {time.monotonic() - started:.0f} s", flush=True)


def _experiments(
    session: Session, settings: Settings, spec: ExperimentSpec, project_id: str, copies: int
) -> None:
    """One finished experiment submitted as the API would, and ``copies`` copies of its row."""
    template = experiments.submit(session, CeleryDispatcher(settings), spec, project_id)
    template.status = ExperimentStatus.SUCCEEDED
    template.step = template.total_steps
    session.commit()
    row = {a.key: getattr(template, a.key) for a in Experiment.__mapper__.column_attrs}
    rows = [{**row, "id": new_id()} for _ in range(copies)]
    for start in range(0, len(rows), 5000):
        session.execute(insert(Experiment), rows[start : start + 5000])
    session.commit()


def _points(session: Session, dialect: str, run_id: str, points: int) -> None:
    """The run's points, generated in the database a million rows a statement."""
    session.execute(text("DELETE FROM metric_points WHERE experiment_id = :run"), {"run": run_id})
    session.commit()
    steps = points // len(SERIES)
    for start in range(1, steps + 1, CHUNK_STEPS):
        stop = min(start + CHUNK_STEPS - 1, steps)
        session.execute(
            text(FILL[dialect]),
            {"run": run_id, "start": start, "stop": stop, "names": SERIES,
             "names_json": json.dumps(SERIES)},
        )  # fmt: skip
        session.commit()
        print(f"  filled {stop * len(SERIES):,} of {points:,} points", flush=True)
    session.execute(text("ANALYZE"))
    session.commit()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def peak_rss_mib(pid: int, reset: bool = False) -> float:
    """The process's peak resident memory (VmHWM) in MiB; ``reset`` starts a new peak."""
    if reset:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc (Linux only)")


@dataclass(frozen=True)
class Timing:
    """Seconds of the timed requests of one kind, and the API's peak RSS during them."""

    seconds: list[float]
    rss_mib: float

    def row(self, label: str) -> str:
        s = sorted(self.seconds)
        p95 = s[min(len(s) - 1, math.ceil(0.95 * len(s)) - 1)]
        return (
            f"{label:<44} {statistics.median(s) * 1000:>7.0f}ms {p95 * 1000:>7.0f}ms "
            f"{s[-1] * 1000:>7.0f}ms {self.rss_mib:>9.0f} MiB"
        )


def measure(http: httpx.Client, pid: int, path: str, repeats: int) -> Timing:
    """Seconds of ``repeats`` requests after one warm-up, and the peak RSS."""
    peak_rss_mib(pid, reset=True)
    took: list[float] = []
    for _ in range(repeats + 1):
        started = time.perf_counter()
        response = http.get(path)
        took.append(time.perf_counter() - started)
        if response.status_code != 200:
            raise SystemExit(f"GET {path}: {response.status_code} {response.text[:300]}")
    return Timing(took[1:], peak_rss_mib(pid))


def measure_writes(engine: Engine, settings: Settings, reports: int) -> None:
    """Per report of every series at one new step, each its own transaction as a worker commits
    it: the points' upsert alone, then with the summaries (``MetricRepository.write``), each into
    a new run of the project that is deleted afterwards (with its points and summaries)."""
    sessions = make_session_factory(engine)
    spec = parse_spec(json.loads(EXAMPLE_SPEC.read_text()))

    def rows(run_id: str, batch: list[MetricWrite]) -> list[dict[str, object]]:
        return [
            {"experiment_id": run_id, "step": w.step, "name": w.name, "value": w.value,
             "wall_time": w.wall_time}
            for w in batch
        ]  # fmt: skip

    writers: dict[str, Callable[[Session, str, list[MetricWrite]], object]] = {
        "points only (upsert)": lambda s, run_id, batch: s.execute(
            _upsert(engine.dialect.name), rows(run_id, batch)
        ),
        "points and summaries (write)": lambda s, run_id, batch: MetricRepository(s).write(
            run_id, batch
        ),
    }
    print(f"{'report of ' + str(len(SERIES)) + ' series':<34} {'median':>9} {'p95':>9}")
    for label, write in writers.items():
        with sessions() as session:
            project = auth.ensure_project(session, PROJECT)
            named = spec.model_copy(update={"name": "metrics-scale-writes"})
            run = experiments.submit(session, CeleryDispatcher(settings), named, project.id)
            session.commit()
            took: list[float] = []
            for k in range(reports):
                batch = [MetricWrite(10 * k, n, float(k % 7), 1.8e9 + k) for n in SERIES]
                started = time.perf_counter()
                write(session, run.id, batch)
                session.commit()
                took.append(time.perf_counter() - started)
            session.execute(delete(Experiment).where(Experiment.id == run.id))
            session.commit()
        took.sort()
        p95 = took[min(len(took) - 1, math.ceil(0.95 * len(took)) - 1)]
        print(f"{label:<34} {statistics.median(took) * 1000:>7.2f}ms {p95 * 1000:>7.2f}ms")


@contextmanager
def serve(env: dict[str, str], root: Path, log: Path) -> Iterator[tuple[httpx.Client, int]]:
    """A ``marlforge api`` of the checkout at ``root`` with a viewer key: a client and its pid."""
    # The key first: the CLI makes the server secret the API then reads from the var folder.
    key = cli(env, "keys", "create", "--project", PROJECT, "--role", "viewer").splitlines()[-1]
    port = free_port()
    with log.open("wb") as out:
        api = subprocess.Popen(
            [sys.executable, "-m", "marlforge", "api", "--host", "127.0.0.1", "--port", str(port)],
            cwd=root, env={**env, "PYTHONPATH": str(root)}, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        headers = {"authorization": f"Bearer {key}"}
        with httpx.Client(
            base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=900
        ) as http:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if http.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if api.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the API did not start; its log: {log}")
                time.sleep(0.2)
            yield http, api.pid
    finally:
        api.terminate()
        api.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--points", type=int, default=1_000_000, help="points of the big run")
    parser.add_argument("--experiments", type=int, default=20_000, help="experiments in all")
    parser.add_argument("--requests", type=int, default=5, help="timed requests per kind")
    parser.add_argument("--max-points", type=int, default=1000, help="of the chart requests")
    parser.add_argument("--database-url", help="default: MARLFORGE_DATABASE_URL, else SQLite")
    parser.add_argument("--against", type=Path, help="another checkout's API, timed beside")
    parser.add_argument("--writes", type=int, default=0, help="reports to time writing")
    args = parser.parse_args()

    url = database_url(args.database_url, args.points)
    var_dir = Path(tempfile.mkdtemp(prefix="marlforge-metrics-scale-"))
    env = {
        **os.environ,
        "MARLFORGE_DATABASE_URL": url,
        "MARLFORGE_VAR_DIR": str(var_dir),
        "MARLFORGE_BROKER_URL": "filesystem://",
        "MARLFORGE_LOG_LEVEL": "warning",
        "PYTHONPATH": str(ROOT),
    }
    cli(env, "migrate")
    settings = Settings(var_dir=var_dir, database_url=url, broker_url="filesystem://")
    engine = make_engine(url)
    run, fill_s = fill(engine, settings, args.experiments, args.points)
    engine.dispose()
    shown = make_url(url).render_as_string(hide_password=True)
    print(f"database: {shown}")
    filled = f"filled in {fill_s:.0f} s" if fill_s else "already filled"
    print(
        f"{args.experiments:,} experiments; run {run}: {len(SERIES)} series x "
        f"{args.points // len(SERIES):,} points = {args.points:,} ({filled})"
    )
    charts = f"/v1/metrics?experiment_ids={run}"
    kinds = [
        ("experiment list (50)", "/v1/experiments"),
        ("experiment detail", f"/v1/experiments/{run}"),
        ("metric page (1000 points)", f"/v1/experiments/{run}/metrics?limit=1000"),
        ("1 chart series, max_points=500", f"{charts}&names={SERIES[3]}&max_points=500"),
        (f"all {len(SERIES)} series, max_points=500", f"{charts}&max_points=500"),
        (f"all {len(SERIES)} series, max_points={args.max_points}",
         f"{charts}&max_points={args.max_points}"),
    ]  # fmt: skip
    roots = {"this checkout": ROOT}
    if args.against is not None:
        roots[f"against {args.against}"] = args.against.resolve()
    with ExitStack() as stack:
        apis = {
            label: stack.enter_context(serve(env, root, var_dir / f"api-{k}.log"))
            for k, (label, root) in enumerate(roots.items())
        }
        for label, (_, pid) in apis.items():
            print(f"API of {label} started: {peak_rss_mib(pid):.0f} MiB resident")
        timings: dict[str, dict[str, Timing]] = {label: {} for label in apis}
        for kind, path in kinds:
            for label, (http, pid) in apis.items():
                timings[label][kind] = measure(http, pid, path, args.requests)
    for label, by_kind in timings.items():
        print(f"\n{label} ({args.requests} requests per kind after a warm-up)")
        print(f"{'request':<44} {'median':>9} {'p95':>9} {'slowest':>9} {'API peak RSS':>13}")
        for kind, timing in by_kind.items():
            print(timing.row(kind))
    if args.writes:
        print()
        engine = make_engine(url)
        measure_writes(engine, settings, args.writes)
        engine.dispose()


if __name__ == "__main__":
    main()
