"""The deployment files and the commands they run: the compose file parses, every service runs a
``marlforge`` command the CLI accepts, and ``marlforge migrate`` builds the schema as a process.
(``marlforge api`` and ``marlforge worker --backend torch`` run as processes in tests/e2e.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import create_engine, inspect

from core.cli import build_parser
from learners.enums import Backend

ROOT = Path(__file__).resolve().parents[2]


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
