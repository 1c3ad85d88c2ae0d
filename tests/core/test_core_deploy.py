"""The deployment files and the commands they run: the compose file parses, every service runs a
``marlforge`` command the CLI accepts, every long-running service has a health check and restarts,
the API and the workers wait for healthy stores and finished migrations, ``marlforge migrate``
builds the schema as a process, and ``marlforge worker-health`` follows a real worker process.
(``marlforge api`` and ``marlforge worker --backend torch`` run as processes in tests/e2e.)"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import create_engine, inspect

from core.cli import build_parser
from learners.enums import Backend

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from e2e_support import ServiceProcess, marlforge_command, service_env  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ONE_OFF = {"migrate"}
"""Services that run once and exit: no health check, no restart; others wait for them to finish."""
APPS = ("api", *(f"worker-{b.value}" for b in Backend))


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    parsed: dict[str, Any] = yaml.safe_load((ROOT / "docker" / "docker-compose.yml").read_text())
    return parsed


def test_compose_has_the_stores_the_api_migrations_and_a_worker_per_backend(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]

    assert set(services) == {
        "postgres",
        "redis",
        "migrate",
        "api",
        *(f"worker-{b.value}" for b in Backend),
    }
    assert services["migrate"]["command"] == ["marlforge", "migrate"]
    assert services["api"]["command"][:2] == ["marlforge", "api"]
    for backend in Backend:
        worker = services[f"worker-{backend.value}"]
        assert worker["command"] == ["marlforge", "worker", "--backend", backend.value]
        assert worker["build"]["args"]["EXTRAS"] == backend.value
        assert worker["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    # API and workers share the artifacts volume where the settings say checkpoints live.
    for name in ("api", *(f"worker-{b.value}" for b in Backend)):
        env = services[name]["environment"]
        assert f"artifacts:{env['MARLFORGE_ARTIFACTS_DIR']}" in services[name]["volumes"]
        assert env["MARLFORGE_DATABASE_URL"].startswith("postgresql+psycopg://")
        assert env["MARLFORGE_BROKER_URL"].startswith("redis://")


def test_every_compose_command_is_one_the_cli_accepts(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        command = service.get("command")
        if not command or command[0] != "marlforge":
            continue
        args = build_parser().parse_args(command[1:])
        assert args.command in {"migrate", "api", "worker", "up"}, name


def test_every_long_running_service_has_a_health_check_and_restarts(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]

    assert set(services) > ONE_OFF
    for name, service in services.items():
        if name in ONE_OFF:
            assert service["restart"] == "no" and "healthcheck" not in service, name
            continue
        assert service["restart"] == "unless-stopped", name
        check = service["healthcheck"]
        assert check["test"][0] == "CMD" and len(check["test"]) > 1, name
        assert {"interval", "timeout", "retries"} <= set(check), name


def test_the_health_checks_ask_the_service_itself(compose: dict[str, Any]) -> None:
    services = compose["services"]

    # The API image is python:slim (no curl): Python fetches /readyz, which is 503 (an exception,
    # so a failed check) unless the database and the broker answer.
    api_check = services["api"]["healthcheck"]["test"]
    assert api_check[1:3] == ["python", "-c"] and "/readyz" in api_check[3]
    compile(api_check[3], "healthcheck", "exec")
    for backend in Backend:
        test = services[f"worker-{backend.value}"]["healthcheck"]["test"]
        assert test[1] == "marlforge"
        assert build_parser().parse_args(test[2:]).command == "worker-health"


def test_the_api_and_workers_wait_for_healthy_stores_and_the_migrations(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]

    for name in APPS:
        depends = services[name]["depends_on"]
        assert depends["postgres"]["condition"] == "service_healthy", name
        assert depends["redis"]["condition"] == "service_healthy", name
        assert depends["migrate"]["condition"] == "service_completed_successfully", name
    # A condition is only as good as what it waits on.
    for name, service in services.items():
        for other, needs in service.get("depends_on", {}).items():
            if needs["condition"] == "service_healthy":
                assert "healthcheck" in services[other], (name, other)
            elif needs["condition"] == "service_completed_successfully":
                assert other in ONE_OFF, (name, other)


def test_the_dockerfile_builds_each_worker_from_its_extra() -> None:
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    pyproject = (ROOT / "pyproject.toml").read_text()

    assert "ARG EXTRAS" in dockerfile and ".[${EXTRAS}]" in dockerfile
    for backend in Backend:
        assert f"\n{backend.value} = [" in pyproject


@pytest.mark.integration
def test_marlforge_migrate_builds_the_schema_as_a_process(fresh_postgres_url: str) -> None:
    script = Path(sys.executable).with_name("marlforge")
    env = {"MARLFORGE_DATABASE_URL": fresh_postgres_url, "PATH": str(script.parent)}

    result = subprocess.run(
        [str(script), "migrate"], env=env, capture_output=True, text=True, timeout=120, check=False
    )

    assert result.returncode == 0, result.stderr
    engine = create_engine(fresh_postgres_url)
    try:
        assert {"experiments", "experiment_events"} <= set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def _health(env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*marlforge_command(), "worker-health"],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def worker_env(
    tmp_path: Path, pg_url: str, redis_url: str, queue_prefix: str
) -> Iterator[dict[str, str]]:
    """A worker's environment on the shared Redis, with its own queues and a fast heartbeat."""
    prefix = f"{queue_prefix}health."
    yield service_env(
        {
            "MARLFORGE_DATABASE_URL": pg_url,
            "MARLFORGE_BROKER_URL": redis_url,
            "MARLFORGE_QUEUE_PREFIX": prefix,
            "MARLFORGE_VAR_DIR": str(tmp_path / "var"),
            "MARLFORGE_WORKER_HEARTBEAT_FILE": str(tmp_path / "worker.heartbeat"),
            "MARLFORGE_WORKER_HEARTBEAT_INTERVAL_S": "0.5",
            "MARLFORGE_WORKER_HEARTBEAT_STALE_S": "3",
        }
    )
    import redis

    connection = redis.Redis.from_url(redis_url)
    for key in connection.scan_iter(match=f"*{prefix}*"):
        connection.delete(key)
    connection.close()


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.integration
def test_worker_health_is_0_while_a_real_worker_runs_and_1_once_it_is_killed(
    tmp_path: Path, worker_env: dict[str, str]
) -> None:
    heartbeat = tmp_path / "worker.heartbeat"
    heartbeat.write_text("left by an earlier worker\n")
    worker = ServiceProcess(["worker", "--backend", "torch"], worker_env, tmp_path / "worker.log")
    try:
        worker.wait_for_output(" ready.")
        assert _health(worker_env).returncode == 0, worker.output()[-3000:]
        assert heartbeat.read_text().startswith(f"pid {worker.process.pid} ")
        # Still healthy after a whole staleness period: the worker keeps beating.
        time.sleep(4)
        healthy = _health(worker_env)
        assert healthy.returncode == 0, healthy.stdout
        assert "healthy" in healthy.stdout

        worker.process.send_signal(signal.SIGKILL)
        worker.process.wait(timeout=30)
        killed = time.monotonic()
        while (verdict := _health(worker_env)).returncode == 0:
            assert time.monotonic() - killed < 10, "the dead worker still reads healthy"
            time.sleep(0.5)
    finally:
        worker.stop()

    assert verdict.returncode == 1
    assert "unhealthy" in verdict.stdout and "s old (more than 3 s)" in verdict.stdout
    assert time.monotonic() - killed >= 2  # the last beat stays fresh for its staleness period
