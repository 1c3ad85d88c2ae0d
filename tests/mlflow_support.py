"""A real MLflow tracking server for the tests: ``mlflow server`` as its own process group on a
free port, runs in SQLite and artifacts in a folder (served through the server, as a team's
deployment would), stopped with its workers at the end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.s3_support import free_port


@contextmanager
def mlflow_server(folder: Path, timeout_s: float = 90.0) -> Iterator[str]:
    """The tracking URI of a running ``mlflow server``."""
    port = free_port()
    folder.mkdir(parents=True, exist_ok=True)
    mlflow = Path(sys.executable).with_name("mlflow")
    log = (folder / "mlflow.log").open("ab")
    process = subprocess.Popen(
        [
            str(mlflow),
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--backend-store-uri",
            f"sqlite:///{folder / 'mlflow.db'}",
            "--artifacts-destination",
            str(folder / "artifacts"),
            "--workers",
            "1",
        ],  # fmt: skip
        cwd=folder,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "MLFLOW_TRACKING_URI": ""},
        start_new_session=True,
    )
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"mlflow server did not start:\n{(folder / 'mlflow.log').read_text()}"
                )
            time.sleep(0.5)
        yield uri
    finally:
        with_group = os.getpgid(process.pid) if process.poll() is None else None
        if with_group is not None:
            os.killpg(with_group, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        log.close()
