"""A real S3-protocol server for the tests: moto's standalone server (``python -m moto.server``)
as its own process on a free port, the test stand-in for MinIO or AWS S3. The code under test talks
to it over HTTP exactly as it would to a real store; only these helpers know it is moto.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

# Test credentials for moto (it accepts any), and no lookups outside the machine: no profile
# files, no instance metadata. Few attempts, so a store that is gone fails a run within seconds.
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "marlforge-test",
    "AWS_SECRET_ACCESS_KEY": "marlforge-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_MAX_ATTEMPTS": "2",
}


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class MotoServer:
    """One ``moto.server`` process; ``kill`` and ``start`` it again to take the store away (moto
    keeps its buckets in memory: a restarted server is empty)."""

    def __init__(self, log_dir: Path) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / f"moto-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60.0) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **AWS_ENV},
            )
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.client().list_buckets()
                return
            except Exception as exc:  # not listening yet
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"moto server did not start: {exc}; {self.log_path.read_text()[-2000:]}"
                    ) from None
                time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL the server: connections in progress are cut, new ones refused."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def client(self) -> Any:
        """A boto3 client of the server, for the tests' own looks and tampering."""
        config = Config(retries={"total_max_attempts": 1}, connect_timeout=2, read_timeout=30)
        return boto3.session.Session(
            aws_access_key_id=AWS_ENV["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=AWS_ENV["AWS_SECRET_ACCESS_KEY"],
            region_name=AWS_ENV["AWS_DEFAULT_REGION"],
        ).client("s3", endpoint_url=self.endpoint, config=config)

    def new_bucket(self) -> str:
        """A new empty bucket; its name."""
        name = f"marlforge-{secrets.token_hex(6)}"
        self.client().create_bucket(Bucket=name)
        return name
