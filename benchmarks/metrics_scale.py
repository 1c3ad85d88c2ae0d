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

Then starts ``marlforge api`` with a viewer key (``marlforge keys create``), sends each request
once to warm up and ``--requests`` times more, and prints the median and slowest latency and the
API process's peak resident memory during them (Linux: VmHWM, reset before each request kind).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from sqlalchemy import Engine, create_engine, func, insert, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core import auth, experiments  # noqa: E402
from core.db import make_engine, make_session_factory  # noqa: E402
from core.enums import ExperimentStatus  # noqa: E402
from core.ids import new_id  # noqa: E402
from core.models import Experiment, MetricPointRow  # noqa: E402
from core.queue import CeleryDispatcher  # noqa: E402
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
            return run.id, 0.0
        if run is None:
            named = spec.model_copy(update={"name": run_name})
            run = experiments.submit(session, CeleryDispatcher(settings), named, project.id)
            run.status = ExperimentStatus.SUCCEEDED
            session.commit()
        _points(session, engine.dialect.name, run.id, points)
        return run.id, time.monotonic() - started


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


def measure(http: httpx.Client, pid: int, path: str, repeats: int) -> tuple[float, float, float]:
    """Median and slowest seconds of ``repeats`` requests after one warm-up, and the peak RSS."""
    peak_rss_mib(pid, reset=True)
    took: list[float] = []
    for _ in range(repeats + 1):
        started = time.perf_counter()
        response = http.get(path)
        took.append(time.perf_counter() - started)
        if response.status_code != 200:
            raise SystemExit(f"GET {path}: {response.status_code} {response.text[:300]}")
    return statistics.median(took[1:]), max(took[1:]), peak_rss_mib(pid)


def serve(env: dict[str, str], log: Path, run: Callable[[httpx.Client, int], None]) -> None:
    # The key first: the CLI makes the server secret the API then reads from the var folder.
    key = cli(env, "keys", "create", "--project", PROJECT, "--role", "viewer").splitlines()[-1]
    port = free_port()
    with log.open("wb") as out:
        api = subprocess.Popen(
            [sys.executable, "-m", "marlforge", "api", "--host", "127.0.0.1", "--port", str(port)],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
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
            run(http, api.pid)
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
    charts = f"/v1/metrics?experiment_ids={run}&max_points={args.max_points}"
    kinds = [
        ("experiment list (50)", "/v1/experiments"),
        ("experiment detail", f"/v1/experiments/{run}"),
        ("metric page (1000 points)", f"/v1/experiments/{run}/metrics?limit=1000"),
        (f"1 chart series, max_points={args.max_points}", f"{charts}&names={SERIES[3]}"),
        (f"all {len(SERIES)} series, max_points={args.max_points}", charts),
    ]

    def run_all(http: httpx.Client, pid: int) -> None:
        print(f"API started: {peak_rss_mib(pid):.0f} MiB resident")
        print(f"{'request':<34} {'median':>9} {'slowest':>9} {'API peak RSS':>13}")
        for label, path in kinds:
            median, slowest, rss = measure(http, pid, path, args.requests)
            print(f"{label:<34} {median * 1000:>7.0f}ms {slowest * 1000:>7.0f}ms {rss:>9.0f} MiB")

    serve(env, var_dir / "api.log", run_all)


if __name__ == "__main__":
    main()
