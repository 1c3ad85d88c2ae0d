"""Checkpoint storage: how fast a checkpoint is written and downloaded, and how much memory the API
needs to serve it, for a directory and an S3 bucket side by side.

    python benchmarks/storage.py                               # 10 MB and 200 MB, 3 rounds
    python benchmarks/storage.py --sizes-mb 10 200 1000 --rounds 1

Each store gets its own SQLite database, var folder and ``marlforge api`` process (as deployed),
whose ``MARLFORGE_ARTIFACTS_URL`` names it: a directory (``file://``), or a bucket on moto's
standalone S3 server (``python -m moto.server``, its own process on a free port; the tests'
stand-in for MinIO or AWS, so the S3 figures measure moto on this machine, not AWS). Every child
process runs with its CPU threads capped at 1 (``workers.threads``).

- **write**: a checkpoint of random bytes goes through the worker's own
  ``DatabaseHooks.checkpoint``: the store's ``put`` (a local temporary file filled, hashed and
  flushed to disk, then renamed into place or uploaded by boto3, in 8 MiB parts above 8 MiB), the
  checkpoint's row, and the delete of the previous round's checkpoint (``keep_last=1``), all
  timed. The writer only copies a prepared file, where a learner would serialise its weights.
- **download**: ``GET /v1/experiments/<id>/checkpoints/<id>/file`` with a viewer key, streamed
  by the API (``MARLFORGE_DOWNLOAD_URL_TTL_S`` is unset: no presigned URL), read here in 1 MiB
  pieces and checked against the recorded sha256, after an untimed request for its first byte (so
  that the API's first read of a store, which makes its client, is not counted). The API's peak
  resident memory (VmHWM) is reset before each download (``5`` written to
  ``/proc/<pid>/clear_refs``; Linux only) and read after it: ``RSS before`` is the resident
  memory at the reset, ``growth`` the most any download added to it.

Cases alternate between the stores (each size: directory, then bucket); each runs ``--rounds``
times and the table shows the median (of the peak, the highest). MB are 10^6 bytes; MiB 2^20.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from sqlalchemy import select

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core import auth, migrate  # noqa: E402
from core.db import make_engine, make_session_factory  # noqa: E402
from core.dispatch.queue import CeleryDispatcher  # noqa: E402
from core.enums import ExperimentStatus as S  # noqa: E402
from core.experiments import service as experiments  # noqa: E402
from core.lifecycle import transition  # noqa: E402
from core.models import Checkpoint  # noqa: E402
from core.settings import Settings  # noqa: E402
from core.storage import store_for  # noqa: E402
from learners.admission.parse import parse_spec  # noqa: E402
from tests.s3_support import AWS_ENV, MotoServer, free_port  # noqa: E402
from workers.runs.hooks import DatabaseHooks  # noqa: E402
from workers.threads import thread_environment  # noqa: E402

PROJECT = "storage-bench"
EXAMPLE_SPEC = ROOT / "examples" / "ddpg_pendulum.json"
MB = 1_000_000
MIB = 1 << 20


@dataclass
class Case:
    """One store and one size: the figures of every round."""

    store: str
    size_mb: int
    write_s: list[float] = field(default_factory=list)
    download_s: list[float] = field(default_factory=list)
    rss_before_mib: list[float] = field(default_factory=list)
    peak_mib: list[float] = field(default_factory=list)


@dataclass
class Deployment:
    """One store with its database, its API process and a client holding a viewer key."""

    name: str
    hooks: dict[int, DatabaseHooks]
    """Per size in MB: the hooks of that size's run, as a worker holds them."""
    api: subprocess.Popen[bytes]
    http: httpx.Client


def peak_rss_mib(pid: int, reset: bool = False) -> float:
    """The process's peak resident memory (VmHWM) in MiB; ``reset`` starts a new peak and
    returns the resident memory (VmRSS) at that moment."""
    if reset:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    field_name = "VmRSS:" if reset else "VmHWM:"
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field_name} in /proc (Linux only)")


def service_env(var_dir: Path, artifacts_url: str, endpoint: str) -> dict[str, str]:
    """The environment of one deployment's processes: this one's without MARLFORGE_*, moto's
    credentials and one CPU thread."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARLFORGE_")}
    env.update(AWS_ENV)
    env.update(thread_environment(1))
    env.update(
        MARLFORGE_DATABASE_URL=f"sqlite:///{var_dir / 'marlforge.db'}",
        MARLFORGE_VAR_DIR=str(var_dir),
        MARLFORGE_BROKER_URL="filesystem://",
        MARLFORGE_ARTIFACTS_URL=artifacts_url,
        MARLFORGE_S3_ENDPOINT_URL=endpoint,
        MARLFORGE_LOG_LEVEL="warning",
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
    )
    return env


def cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "marlforge", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"marlforge {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


@contextmanager
def deployment(
    name: str, var_dir: Path, artifacts_url: str, endpoint: str, sizes_mb: list[int]
) -> Iterator[Deployment]:
    """A migrated database with one run per size, and the API serving them."""
    var_dir.mkdir(parents=True, exist_ok=True)
    env = service_env(var_dir, artifacts_url, endpoint)
    settings = Settings(
        var_dir=var_dir,
        database_url=env["MARLFORGE_DATABASE_URL"],
        broker_url="filesystem://",
        artifacts_url=artifacts_url,
        s3_endpoint_url=endpoint,
    )
    migrate.upgrade(settings.database_url)
    engine = make_engine(settings.database_url)
    sessions = make_session_factory(engine)
    storage = store_for(settings)
    spec = parse_spec(json.loads(EXAMPLE_SPEC.read_text()))
    hooks: dict[int, DatabaseHooks] = {}
    with sessions() as session:
        project = auth.ensure_project(session, PROJECT)
        for size in sizes_mb:
            named = spec.model_copy(update={"name": f"storage-{size}mb"})
            run = experiments.submit(session, CeleryDispatcher(settings), named, project.id)
            # The hooks write only to a running run, as a worker's do.
            transition(session, run.id, [S.QUEUED], S.RUNNING, "benchmark")
            session.commit()
            # worker_id None: the hooks are driven by hand, with no lease to hold.
            hooks[size] = DatabaseHooks(
                run.id, sessions, storage, keep_last=1, total_steps=10**9,
                poll_interval_s=3600, time_limit_s=10**6,
            )  # fmt: skip
    # The key first: the CLI makes the server secret the API then reads from the var folder.
    key = cli(env, "keys", "create", "--project", PROJECT, "--role", "viewer").splitlines()[-1]
    port = free_port()
    log = var_dir / "api.log"
    with log.open("wb") as out:
        api = subprocess.Popen(
            [sys.executable, "-m", "marlforge", "api", "--host", "127.0.0.1", "--port", str(port)],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    http = httpx.Client(
        base_url=f"http://127.0.0.1:{port}",
        headers={"authorization": f"Bearer {key}"},
        timeout=600,
    )
    try:
        _wait_ready(http, api, log)
        yield Deployment(name, hooks, api, http)
    finally:
        http.close()
        api.terminate()
        api.wait(timeout=30)
        engine.dispose()


def _wait_ready(http: httpx.Client, api: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120
    while True:
        try:
            if http.get("/readyz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        if api.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the API did not become ready; its log: {log}")
        time.sleep(0.2)


def payload(folder: Path, size_mb: int) -> Path:
    """A file of ``size_mb`` MB of random bytes (incompressible, as weights are)."""
    path = folder / f"payload-{size_mb}mb.bin"
    left = size_mb * MB
    with path.open("wb") as out:
        while left:
            piece = min(left, 8 * MIB)
            out.write(os.urandom(piece))
            left -= piece
    return path


def write(hooks: DatabaseHooks, step: int, source: Path) -> tuple[float, Checkpoint]:
    """Seconds the worker's checkpoint call took, and the row it recorded."""

    def copy(temp: Path) -> None:
        shutil.copyfile(source, temp)

    started = time.perf_counter()
    hooks.checkpoint(step, copy)
    took = time.perf_counter() - started
    if hooks.stop_cause is not None:
        raise SystemExit(f"the run {hooks.experiment_id} stopped: {hooks.stop_cause}")
    with hooks.session_factory() as session:
        row = session.scalars(
            select(Checkpoint).where(
                Checkpoint.experiment_id == hooks.experiment_id, Checkpoint.step == step
            )
        ).one()
    return took, row


def download(deployment: Deployment, row: Checkpoint) -> tuple[float, float, float]:
    """Seconds of one whole download through the API (its sha256 checked), the API's resident
    memory before it and its peak during it, in MiB."""
    pid = deployment.api.pid
    path = f"/v1/experiments/{row.experiment_id}/checkpoints/{row.id}/file"
    # One byte first, so that the API's first read of this store (making its client) is not
    # counted as serving the file.
    deployment.http.get(path, headers={"range": "bytes=0-0"}).raise_for_status()
    rss_before = peak_rss_mib(pid, reset=True)
    digest = hashlib.sha256()
    size = 0
    started = time.perf_counter()
    with deployment.http.stream("GET", path) as response:
        if response.status_code != 200:
            raise SystemExit(f"GET {path}: {response.status_code} {response.read()[:300]!r}")
        for piece in response.iter_bytes(MIB):
            digest.update(piece)
            size += len(piece)
    took = time.perf_counter() - started
    peak = peak_rss_mib(pid)
    if size != row.size_bytes or digest.hexdigest() != row.sha256:
        raise SystemExit(f"{deployment.name}: the download of {path} is not the recorded file")
    return took, rss_before, peak


def table(cases: list[Case]) -> str:
    """The medians as a markdown table."""
    lines = [
        "| store | checkpoint | write | write MB/s | download | download MB/s "
        "| API RSS before | API peak while serving | growth |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for case in cases:
        write_s = statistics.median(case.write_s)
        download_s = statistics.median(case.download_s)
        growth = max(p - b for p, b in zip(case.peak_mib, case.rss_before_mib, strict=True))
        lines.append(
            f"| {case.store} | {case.size_mb} MB | {write_s:.2f} s | {case.size_mb / write_s:.0f} "
            f"| {download_s:.2f} s | {case.size_mb / download_s:.0f} "
            f"| {statistics.median(case.rss_before_mib):.0f} MiB "
            f"| {max(case.peak_mib):.0f} MiB | {growth:+.0f} MiB |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[10, 200], help="in MB")
    parser.add_argument("--rounds", type=int, default=3, help="writes and downloads per case")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="marlforge-storage-bench-"))
    # This process writes to the bucket too (the worker's part), with moto's credentials.
    os.environ.update(AWS_ENV)
    os.environ.update(thread_environment(1))
    moto = MotoServer(work)
    moto.start()
    try:
        bucket = moto.new_bucket()
        with ExitStack() as stack:
            deployments = [
                stack.enter_context(deployment(
                    "filesystem", work / "fs", (work / "fs" / "artifacts").as_uri(), "",
                    args.sizes_mb,
                )),
                stack.enter_context(deployment(
                    "S3 (moto)", work / "s3", f"s3://{bucket}/artifacts", moto.endpoint,
                    args.sizes_mb,
                )),
            ]  # fmt: skip
            cases = run(deployments, work, args.sizes_mb, args.rounds)
    finally:
        moto.stop()
    print(f"{len(cases)} cases, {args.rounds} rounds each")
    print(table(cases))
    shutil.rmtree(work, ignore_errors=True)


def run(deployments: list[Deployment], work: Path, sizes_mb: list[int], rounds: int) -> list[Case]:
    cases = {(d.name, size): Case(d.name, size) for size in sizes_mb for d in deployments}
    sources = {size: payload(work, size) for size in sizes_mb}
    for step in range(1, rounds + 1):
        for size in sizes_mb:
            for each in deployments:
                case = cases[each.name, size]
                write_s, row = write(each.hooks[size], step, sources[size])
                download_s, before, peak = download(each, row)
                case.write_s.append(write_s)
                case.download_s.append(download_s)
                case.rss_before_mib.append(before)
                case.peak_mib.append(peak)
                print(
                    f"round {step}: {each.name:<10} {size:>5} MB  write {write_s:6.2f} s  "
                    f"download {download_s:6.2f} s  API {before:.0f} -> {peak:.0f} MiB",
                    flush=True,
                )
    return list(cases.values())


if __name__ == "__main__":
    main()
