"""The worker's heartbeat and ``worker-health``'s verdict: the file is rewritten only while the
consumer is connected and the broker answers, never after the worker stops, and it is judged by its
age. (A real worker process, healthy and then killed, is in tests/core/test_core_deploy.py.)"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from core.settings import Settings
from workers import health


class Connection:
    def __init__(self, connected: bool) -> None:
        self.connected = connected


class Consumer:
    def __init__(self, connection: Connection | None) -> None:
        self.connection = connection


class Dispatcher:
    def __init__(self, reason: str | None = None) -> None:
        self.reason = reason

    def enqueue(self, experiment_id: str, backend: Any, device: Any, suite: str) -> None:
        raise AssertionError("the heartbeat never sends")

    def unreachable_reason(self) -> str | None:
        return self.reason


def test_a_beat_rewrites_the_file_only_while_the_check_passes(tmp_path: Path) -> None:
    path = tmp_path / "run" / "worker.heartbeat"
    answer: list[str | None] = [None]
    heartbeat = health.Heartbeat(path, 1.0, lambda: answer[0])

    assert heartbeat.beat() and path.read_text().startswith(f"pid {os.getpid()} at ")
    os.utime(path, (1.0, 1.0))
    answer[0] = "broker unreachable: Error 111"
    assert not heartbeat.beat()
    assert path.stat().st_mtime == 1.0  # left to go stale
    answer[0] = None
    assert heartbeat.beat() and path.stat().st_mtime > 1.0


def test_a_stopped_heartbeat_removes_its_file_and_never_beats_again(tmp_path: Path) -> None:
    path = tmp_path / "worker.heartbeat"
    heartbeat = health.Heartbeat(path, 0.01, lambda: None).start()
    deadline = time.monotonic() + 10
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert path.exists()

    heartbeat.stop()

    assert not path.exists()
    assert not heartbeat.beat() and not path.exists()


def test_the_consumer_check_needs_a_connection_and_a_broker_that_answers() -> None:
    def check(consumer: Consumer, dispatcher: Dispatcher) -> str | None:
        return health.consumer_check(consumer, dispatcher)()

    assert check(Consumer(Connection(True)), Dispatcher()) is None
    no_connection = "the worker's consumer has no broker connection"
    assert check(Consumer(None), Dispatcher()) == no_connection  # Celery is reconnecting
    assert check(Consumer(Connection(False)), Dispatcher()) == no_connection
    down = "broker unreachable: Error 111 connecting to redis:6379"
    assert check(Consumer(Connection(True)), Dispatcher(down)) == down


def test_the_verdict_is_the_heartbeats_age(tmp_path: Path) -> None:
    path = tmp_path / "worker.heartbeat"
    missing = health.problem(path, stale_s=30)
    assert missing is not None and "no heartbeat file" in missing

    health.write(path)
    written = path.stat().st_mtime
    assert health.problem(path, stale_s=30, now=written + 29) is None
    stale = health.problem(path, stale_s=30, now=written + 31)
    assert stale is not None and "31.0 s old (more than 30 s)" in stale


def test_worker_health_exits_0_for_a_fresh_heartbeat_and_1_otherwise(
    tmp_path: Path, capsys: Any
) -> None:
    settings = Settings(var_dir=tmp_path)
    assert settings.worker_heartbeat_file == tmp_path.resolve() / "worker.heartbeat"

    assert health.main(settings) == 1
    assert capsys.readouterr().out.startswith("unhealthy: no heartbeat file")
    health.write(settings.worker_heartbeat_file)
    assert health.main(settings) == 0
    os.utime(settings.worker_heartbeat_file, (1.0, 1.0))
    assert health.main(settings) == 1
    assert "s old" in capsys.readouterr().out.splitlines()[-1]
