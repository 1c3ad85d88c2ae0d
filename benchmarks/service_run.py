"""One experiment end to end through the embedded service, timed.

    python benchmarks/service_run.py --spec examples/ddpg_pendulum.json --device cuda

Starts ``marlforge up`` (SQLite, the embedded broker and one local worker) under a fresh var
folder, POSTs the spec, polls ``GET /v1/experiments/{id}`` until the run ends, downloads the last
checkpoint and checks its sha256 against the one the API lists, then stops the service with
SIGINT. Prints the status path, the wall time from submission to ``succeeded``, the training
steps per second the worker reported and the last evaluation return. Exits non-zero when the run
does not succeed or the download does not match, so it doubles as a smoke test of a deployment
(a GPU worker: ``--device cuda``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.enums import TERMINAL_STATUSES  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_ready(http: httpx.Client, service: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if service.poll() is not None:
            raise SystemExit(f"the service exited with {service.returncode} before it was ready")
        try:
            if http.get("/readyz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.25)
    raise SystemExit(f"the API was not ready within {timeout:.0f} s")


def run(spec: dict[str, Any], http: httpx.Client, timeout: float) -> int:
    submitted = time.monotonic()
    response = http.post("/v1/experiments", json=spec)
    if response.status_code != 201:
        print(f"submission refused: {response.status_code} {response.text}")
        return 1
    experiment = response.json()
    eid = experiment["id"]
    seen = [experiment["status"]]
    while experiment["status"] not in TERMINAL_STATUSES:
        if time.monotonic() - submitted > timeout:
            print(f"still {experiment['status']} after {timeout:.0f} s")
            return 1
        time.sleep(0.5)
        experiment = http.get(f"/v1/experiments/{eid}").json()
        if experiment["status"] != seen[-1]:
            seen.append(experiment["status"])
    wall = time.monotonic() - submitted
    print(f"experiment {eid}: {' -> '.join(seen)} in {wall:.1f} s")
    if experiment["status"] != "succeeded":
        print(f"reason: {experiment['status_reason']}")
        return 1

    latest = experiment["latest_metrics"]
    for name in ("perf/steps_per_second", "eval/episode_return", "train/episode_return"):
        if name in latest:
            print(f"  {name} at step {latest[name]['step']}: {latest[name]['value']:.2f}")

    checkpoints = http.get(f"/v1/experiments/{eid}/checkpoints").json()["items"]
    last = checkpoints[-1]
    data = http.get(f"/v1/experiments/{eid}/checkpoints/{last['id']}/file").content
    digest = hashlib.sha256(data).hexdigest()
    ok = digest == last["sha256"]
    print(
        f"  checkpoint at step {last['step']}: {len(data)} bytes, sha256 "
        f"{'matches' if ok else 'DIFFERS from'} the listed one"
    )
    return 0 if ok else 1


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--spec", type=Path, default=ROOT / "examples" / "ddpg_pendulum.json")
    parser.add_argument("--device", choices=["cpu", "cuda", "auto"], help="replaces the spec's")
    parser.add_argument("--total-steps", type=int, help="replaces the spec's")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds to wait")
    parser.add_argument("--var-dir", type=Path, help="default: a fresh temporary folder")
    args = parser.parse_args()

    spec = json.loads(args.spec.read_text())
    if args.device:
        spec["device"] = args.device
    if args.total_steps:
        spec["total_steps"] = args.total_steps
    var_dir = args.var_dir or Path(tempfile.mkdtemp(prefix="marlforge-run-")) / "var"
    port = free_port()
    env = {**os.environ, "MARLFORGE_VAR_DIR": str(var_dir), "PYTHONUNBUFFERED": "1"}
    for name in ("MARLFORGE_DATABASE_URL", "MARLFORGE_BROKER_URL"):
        env.pop(name, None)  # the embedded defaults
    log_path = var_dir.parent / "service.log"
    var_dir.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        service = subprocess.Popen(
            [sys.executable, "-m", "marlforge", "up", "--port", str(port)],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
                wait_ready(http, service, timeout=180)
                code = run(spec, http, args.timeout)
        finally:
            service.send_signal(signal.SIGINT)
            try:
                service.wait(timeout=120)
            except subprocess.TimeoutExpired:
                service.kill()
    if code:
        print(f"service log: {log_path}\n" + log_path.read_text()[-4000:])
    raise SystemExit(code)


if __name__ == "__main__":
    main()
