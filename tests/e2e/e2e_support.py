"""Helpers of the end-to-end tests: service processes started like a deployment starts them, an
HTTP client that waits for an experiment to reach a status, and a redis-server of a test's own."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from workers.threads import THREAD_VARIABLES

TERMINAL = {"succeeded", "failed", "cancelled"}


def marlforge_command() -> list[str]:
    """The installed ``marlforge`` console script (what docker-compose and ``make up`` run)."""
    script = Path(sys.executable).with_name("marlforge")
    return [str(script)] if script.exists() else [sys.executable, "-m", "marlforge"]


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def service_env(overrides: Mapping[str, str], drop: Iterable[str] = ()) -> dict[str, str]:
    """The environment of a service process: this one's, with MARLFORGE_* replaced."""
    # The frameworks' thread variables go too: the worker sets them from MARLFORGE_WORKER_THREADS
    # (default 1), and the tests run with that default.
    left_out = {*drop, *THREAD_VARIABLES}
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("MARLFORGE_") and k not in left_out
    }
    env["PYTHONUNBUFFERED"] = "1"
    # The stacks of a test session share its database, each with a queue prefix of its own: one
    # stack's reconciler would send the runs another left queued to its own queues. A test of the
    # reconciler gives its stack a database of its own and turns it on.
    env["MARLFORGE_RECONCILE_INTERVAL_S"] = "0"
    env.update(overrides)
    return env


class ServiceProcess:
    """One ``marlforge <command>`` process with its output in a log file."""

    def __init__(self, args: list[str], env: Mapping[str, str], log_path: Path) -> None:
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(
            [*marlforge_command(), *args],
            env=dict(env),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def output(self) -> str:
        """Everything the process has printed so far."""
        return self.log_path.read_text(errors="replace")

    def wait_for_output(self, text: str, timeout: float = 120) -> None:
        """Block until ``text`` appears in the output; fail if the process dies first."""
        deadline = time.monotonic() + timeout
        while text not in self.output():
            if self.process.poll() is not None:
                raise AssertionError(
                    f"process exited ({self.process.returncode}):\n{self.output()}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"no {text!r} within {timeout} s:\n{self.output()[-4000:]}")
            time.sleep(0.2)

    def children(self) -> list[int]:
        """Process ids whose parent is this process."""
        found = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == self.process.pid:
                found.append(int(stat.parent.name))
        return found

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 90) -> int:
        """Send ``sig``, wait for the exit (killing after ``timeout``) and return the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._log.close()
        return self.process.returncode


RAN_TO_SUCCESS = [(None, "queued"), ("queued", "running"), ("running", "succeeded")]
"""The timeline (``Api.transitions``) of a run that a worker took from the queue and finished."""


def create_key(env: Mapping[str, str], role: str = "member", project: str = "default") -> str:
    """A new key made by ``marlforge keys create`` (what an operator runs), from its last line."""
    command = [*marlforge_command(), "keys", "create", "--project", project, "--role", role]
    done = subprocess.run(
        [*command, "--name", f"e2e {role}"],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


class Api:
    """A client of a running API, sending ``key`` when given."""

    def __init__(self, base_url: str, key: str | None = None) -> None:
        self.key = key
        headers = {"authorization": f"Bearer {key}"} if key is not None else {}
        self.http = httpx.Client(base_url=base_url, timeout=30, headers=headers)

    def wait_ready(self, timeout: float = 120, process: ServiceProcess | None = None) -> None:
        """Block until ``/readyz`` answers 200."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.http.get("/readyz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if process is not None and process.process.poll() is not None:
                raise AssertionError(f"the service exited:\n{process.output()}")
            if time.monotonic() > deadline:
                raise AssertionError("the API never became ready")
            time.sleep(0.25)

    def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
        """POST a spec; it must be accepted."""
        response = self.http.post("/v1/experiments", json=spec)
        assert response.status_code == 201, response.text
        body: dict[str, Any] = response.json()
        return body

    def get(self, experiment_id: str) -> dict[str, Any]:
        """GET an experiment."""
        response = self.http.get(f"/v1/experiments/{experiment_id}")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def transitions(self, experiment_id: str) -> list[tuple[str | None, str]]:
        """The run's recorded status transitions, oldest first (its timeline). Unlike the statuses
        a poll happens to see, it misses none: a short run can start and end between two polls."""
        response = self.http.get(f"/v1/experiments/{experiment_id}/timeline")
        assert response.status_code == 200, response.text
        return [(t["from_status"], t["to_status"]) for t in response.json()["items"]]

    def wait_until(
        self, experiment_id: str, statuses: set[str], min_step: int = 0, timeout: float = 240
    ) -> dict[str, Any]:
        """Poll until the status is one of ``statuses`` (and the step at least ``min_step``);
        returns the experiment. The statuses it went through are ``transitions``'s to tell: a
        poll can miss one."""
        deadline = time.monotonic() + timeout
        while True:
            body = self.get(experiment_id)
            if body["status"] in statuses and body["progress"]["step"] >= min_step:
                return body
            if body["status"] in TERMINAL - statuses:
                raise AssertionError(f"ended {body['status']}: {body['status_reason']}")
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"still {body['status']} at {body['progress']} after {timeout} s"
                )
            time.sleep(0.2)

    def all_metrics(self, experiment_id: str) -> list[dict[str, Any]]:
        """Every metric point, read page by page."""
        points: list[dict[str, Any]] = []
        after: int | None = None
        while True:
            params: dict[str, Any] = {"limit": 50}
            if after is not None:
                params["after_step"] = after
            page = self.http.get(f"/v1/experiments/{experiment_id}/metrics", params=params).json()
            points.extend(page["items"])
            after = page["next_after_step"]
            if after is None:
                return points

    def checkpoints(self, experiment_id: str) -> list[dict[str, Any]]:
        """The experiment's checkpoints, oldest first."""
        items: list[dict[str, Any]] = self.http.get(
            f"/v1/experiments/{experiment_id}/checkpoints"
        ).json()["items"]
        return items


@dataclass(frozen=True)
class Stack:
    """A running API (its client), the worker process behind it, and their environment."""

    api: Api
    worker: ServiceProcess
    env: Mapping[str, str]


class RedisServer:
    """A redis-server of the test's own, that it can kill and start again on the same port."""

    def __init__(self, folder: Path) -> None:
        self.port = free_port()
        self.folder = folder
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary is not None, "redis-server is not installed"
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.folder)],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        import redis

        deadline = time.monotonic() + 20
        while True:
            try:
                redis.Redis.from_url(self.url, socket_connect_timeout=1).ping()
                return
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.1)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=10)
