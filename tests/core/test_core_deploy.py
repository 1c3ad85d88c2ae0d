"""The deployment files and the commands they run. hadolint lints the Dockerfile and every compose
file is validated against the Compose Specification's schema, so a broken file fails here rather
than in a deploy. Then what the linters cannot know: compose reads every password from docker/.env
(``docker/.env.example``, which git ignores once copied), Redis requires one and every URL carries
it, the API is published on the loopback unless asked, each image is built by one service and
tagged with the version, MinIO holds the artifacts (a health check, a job that makes the bucket,
no volume shared by the API and workers), the GPU host's file needs nothing but URLs, every
service's environment is settings the application accepts, every service runs a ``marlforge``
command the CLI accepts, every long-running service has a health check and restarts, and the API
and workers wait for healthy stores and finished one-off jobs. ``marlforge migrate`` builds the
schema as a process and ``marlforge worker-health`` follows a real worker process (on the
filesystem store: the S3 store under real processes is tests/workers/test_worker_s3.py's)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from sqlalchemy import create_engine, inspect

from core.settings import Settings
from learners.enums import Backend
from marlforge.cli import build_parser

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from e2e_support import ServiceProcess, marlforge_command, service_env  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
COMPOSE_FILES = sorted(DOCKER.glob("docker-compose*.yml"))
ONE_OFF = {"migrate", "minio-init"}
"""Services that run once and exit: no health check, no restart; others wait for them to finish."""
STORES = {"postgres", "redis", "minio"}
WORKERS = tuple(f"worker-{b.value}" for b in Backend)
APPS = ("api", *WORKERS)
BUCKET = "marlforge"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]

_VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\})"
)


def _interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """``value`` with compose's ``${VAR}``, ``${VAR:-default}``, ``${VAR:?error}`` and ``$$``
    substituted from ``env``, the way ``docker compose`` reads the .env file into a compose file."""
    if isinstance(value, dict):
        return {k: _interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        if match["escaped"]:
            return "$"
        found, op = env.get(match["name"]), match["op"] or ""
        missing = found is None or (op.startswith(":") and found == "")
        if missing and op.endswith("?"):
            raise LookupError(f"{match['name']}: {match['arg']}")
        return match["arg"] if missing and op.endswith("-") else (found or "")

    return _VARIABLE.sub(substitute, value)


def _env_file(path: Path) -> dict[str, str]:
    lines = [line.strip() for line in path.read_text().splitlines()]
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def _load(name: str) -> dict[str, Any]:
    parsed: dict[str, Any] = yaml.safe_load((DOCKER / name).read_text())
    return parsed


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return _load("docker-compose.yml")


@pytest.fixture(scope="module")
def gpu_compose() -> dict[str, Any]:
    return _load("docker-compose.gpu-worker.yml")


@pytest.fixture(scope="module")
def dotenv() -> dict[str, str]:
    """docker/.env as an operator fills it in from the example: every blank password set."""
    example = _env_file(DOCKER / ".env.example")
    return {k: v or f"test{k.lower().replace('_', '')}0123456789" for k, v in example.items()}


def _linter(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: the dev extra provides it (make install)")
    return found


def test_hadolint_finds_nothing_in_the_dockerfile() -> None:
    result = subprocess.run(
        [_linter("hadolint"), "--no-color", "docker/Dockerfile"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip

    assert result.returncode == 0, result.stdout + result.stderr


def test_every_compose_file_follows_the_compose_specification() -> None:
    assert [f.name for f in COMPOSE_FILES] == [
        "docker-compose.gpu-worker.yml",
        "docker-compose.stores.yml",
        "docker-compose.yml",
    ]
    result = subprocess.run(
        [_linter("check-jsonschema"), "--builtin-schema", "vendor.compose-spec",
         *(str(f.relative_to(ROOT)) for f in COMPOSE_FILES)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip

    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_has_the_stores_the_one_off_jobs_the_api_and_a_worker_per_backend(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]

    assert set(services) == {*STORES, *ONE_OFF, *APPS}
    assert services["migrate"]["command"] == ["marlforge", "migrate"]
    assert services["api"]["command"][:2] == ["marlforge", "api"]
    for backend in Backend:
        worker = services[f"worker-{backend.value}"]
        assert worker["command"] == ["marlforge", "worker", "--backend", backend.value]
        assert worker["build"]["args"]["EXTRAS"] == backend.value


def test_the_artifacts_live_in_minio_and_no_volume_is_shared_by_the_api_and_workers(
    compose: dict[str, Any], dotenv: dict[str, str]
) -> None:
    services = _interpolate(compose["services"], dotenv)

    for name in (*APPS, "migrate"):
        env = services[name]["environment"]
        assert env["MARLFORGE_ARTIFACTS_URL"] == f"s3://{BUCKET}/artifacts", name
        assert env["MARLFORGE_S3_ENDPOINT_URL"] == "http://minio:9000", name
        assert env["AWS_ACCESS_KEY_ID"] == dotenv["S3_ACCESS_KEY_ID"], name
        assert env["AWS_SECRET_ACCESS_KEY"] == dotenv["S3_SECRET_ACCESS_KEY"], name
        assert "MARLFORGE_ARTIFACTS_DIR" not in env, name
        assert "volumes" not in services[name], name
    # The API and workers sign in as the bucket's own user, not as MinIO's administrator.
    assert dotenv["S3_ACCESS_KEY_ID"] != dotenv["MINIO_ROOT_USER"]


def test_minio_has_a_health_check_and_a_job_makes_the_bucket_at_every_start(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    minio, init = services["minio"], services["minio-init"]

    assert re.fullmatch(r"minio/minio:RELEASE\.\d{4}-\d\d-\d\dT[\d-]+Z", minio["image"])
    assert re.fullmatch(r"minio/mc:RELEASE\.\d{4}-\d\d-\d\dT[\d-]+Z", init["image"])
    assert minio["healthcheck"]["test"] == ["CMD", "mc", "ready", "local"]
    assert minio["volumes"] == ["miniodata:/data"]
    assert init["depends_on"] == {"minio": {"condition": "service_healthy"}}
    script = init["command"][0]
    assert init["entrypoint"] == ["/bin/sh", "-c"] and script.startswith("set -eu\n")
    assert "mc alias set store http://minio:9000 " in script
    assert f"mc mb --ignore-existing store/{BUCKET}\n" in script
    assert '"Resource": ["arn:aws:s3:::marlforge", "arn:aws:s3:::marlforge/*"]' in script
    assert 'mc admin user add store "$$S3_ACCESS_KEY_ID" "$$S3_SECRET_ACCESS_KEY"' in script


def test_no_password_is_written_in_a_compose_file(dotenv: dict[str, str]) -> None:
    secret = re.compile(r"PASSWORD|SECRET|_KEY$|AUTH")
    for path in COMPOSE_FILES:
        for name, service in _load(path.name)["services"].items():
            env = service.get("environment", {})
            for key, value in env.items():
                if secret.search(key):
                    assert re.fullmatch(r"\$\{[A-Z0-9_]+(:\?[^}]*)?\}", value), (path, name, key)
                for url in re.findall(r"[a-z+]+://\S+", str(value)):
                    password = urlsplit(url).password
                    assert password is None or password.startswith("${"), (path, name, key)
    # Every variable a compose file requires is in the example an operator copies.
    required = set(re.findall(r"\$\{([A-Z0-9_]+):\?", (DOCKER / "docker-compose.yml").read_text()))
    assert required <= set(dotenv)
    assert {"POSTGRES_PASSWORD", "REDIS_PASSWORD", "MINIO_ROOT_PASSWORD"} <= required


def test_the_filled_in_env_files_are_ignored_by_git_and_the_examples_are_not() -> None:
    def ignored(path: str) -> bool:
        check = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT, check=False)
        return check.returncode == 0

    assert ignored("docker/.env") and ignored("docker/gpu-worker.env")
    assert not ignored("docker/.env.example") and not ignored("docker/gpu-worker.env.example")


def test_redis_requires_a_password_and_every_url_carries_it(
    compose: dict[str, Any], dotenv: dict[str, str]
) -> None:
    services = _interpolate(compose["services"], dotenv)
    password = dotenv["REDIS_PASSWORD"]

    command = services["redis"]["command"]
    assert command[command.index("--requirepass") + 1] == password
    assert services["redis"]["environment"]["REDISCLI_AUTH"] == password
    database_password = dotenv["POSTGRES_PASSWORD"]
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"] == database_password
    for name in (*APPS, "migrate"):
        env = services[name]["environment"]
        assert urlsplit(env["MARLFORGE_BROKER_URL"]).password == password, name
        assert urlsplit(env["MARLFORGE_DATABASE_URL"]).password == database_password, name


def test_a_compose_file_without_its_passwords_is_refused(compose: dict[str, Any]) -> None:
    with pytest.raises(LookupError, match="set POSTGRES_PASSWORD in docker/.env"):
        _interpolate(compose["services"]["postgres"], {})


def test_only_the_api_is_published_and_on_the_loopback_unless_asked(
    compose: dict[str, Any], dotenv: dict[str, str]
) -> None:
    published = {name: s["ports"] for name, s in compose["services"].items() if "ports" in s}

    assert published == {"api": ["${MARLFORGE_API_BIND:-127.0.0.1}:8000:8000"]}
    assert _interpolate(published["api"], dotenv) == ["127.0.0.1:8000:8000"]
    assert _interpolate(published["api"], {"MARLFORGE_API_BIND": "0.0.0.0"}) == [
        "0.0.0.0:8000:8000"
    ]


def test_the_stores_file_publishes_the_stores_only_where_it_is_told(
    gpu_compose: dict[str, Any],
) -> None:
    stores = _load("docker-compose.stores.yml")["services"]
    bound = _interpolate(stores, {"MARLFORGE_STORES_BIND": "10.0.0.5"})

    assert set(stores) == STORES and all(set(s) == {"ports"} for s in stores.values())
    ports = {name: s["ports"][0].split(":") for name, s in bound.items()}
    assert ports == {
        "postgres": ["10.0.0.5", "5432", "5432"],
        "redis": ["10.0.0.5", "6379", "6379"],
        "minio": ["10.0.0.5", "9000", "9000"],
    }
    with pytest.raises(LookupError, match="MARLFORGE_STORES_BIND"):
        _interpolate(stores, {})
    # The GPU host's URLs name those ports.
    gpu_env = _env_file(DOCKER / "gpu-worker.env.example")
    assert urlsplit(gpu_env["MARLFORGE_DATABASE_URL"]).port == 5432
    assert urlsplit(gpu_env["MARLFORGE_BROKER_URL"]).port == 6379
    assert urlsplit(gpu_env["MARLFORGE_S3_ENDPOINT_URL"]).port == 9000


def test_each_image_is_built_by_one_service_and_tagged_with_the_version() -> None:
    for path in (DOCKER / "docker-compose.yml", DOCKER / "docker-compose.gpu-worker.yml"):
        services = yaml.safe_load(path.read_text())["services"]
        builders: dict[str, list[str]] = {}
        for name, service in services.items():
            image = service["image"]
            assert ":" in image and not image.endswith((":latest", ":stable")), (name, image)
            if image.startswith("marlforge-"):
                assert image.endswith(f":${{MARLFORGE_VERSION:-{VERSION}}}"), (name, image)
                builders.setdefault(image, [])
            if "build" in service:
                builders.setdefault(image, []).append(name)
                # Built here, never looked up in a registry.
                assert service["pull_policy"] == "build", name
                assert service["build"]["context"] == ".."
                assert service["build"]["dockerfile"] == "docker/Dockerfile"
        assert all(len(names) == 1 for names in builders.values()), (path.name, builders)


def test_every_compose_command_is_one_the_cli_accepts() -> None:
    for path in COMPOSE_FILES:
        for name, service in _load(path.name)["services"].items():
            command = service.get("command")
            if not command or command[0] != "marlforge":
                continue
            args = build_parser().parse_args(command[1:])
            assert args.command in {"migrate", "api", "worker", "up"}, (path.name, name)


def test_every_long_running_service_has_a_health_check_and_restarts() -> None:
    for path in (DOCKER / "docker-compose.yml", DOCKER / "docker-compose.gpu-worker.yml"):
        for name, service in yaml.safe_load(path.read_text())["services"].items():
            if name in ONE_OFF:
                assert service["restart"] == "no" and "healthcheck" not in service, name
                continue
            assert service["restart"] == "unless-stopped", name
            check = service["healthcheck"]
            assert check["test"][0] in {"CMD", "CMD-SHELL"} and len(check["test"]) > 1, name
            assert {"interval", "timeout", "retries"} <= set(check), name


def test_the_health_checks_ask_the_service_itself(
    compose: dict[str, Any], gpu_compose: dict[str, Any]
) -> None:
    services = {**compose["services"], **gpu_compose["services"]}

    # The API image is python:slim (no curl): Python fetches /readyz, which is 503 (an exception,
    # so a failed check) unless the database, the broker and the store answer.
    api_check = services["api"]["healthcheck"]["test"]
    assert api_check[1:3] == ["python", "-c"] and "/readyz" in api_check[3]
    compile(api_check[3], "healthcheck", "exec")
    for name in (*WORKERS, "worker-torch-gpu"):
        test = services[name]["healthcheck"]["test"]
        assert test[1] == "marlforge", name
        assert build_parser().parse_args(test[2:]).command == "worker-health"
    # redis-cli authenticates with REDISCLI_AUTH; only a PONG (not a NOAUTH error) is healthy.
    assert services["redis"]["healthcheck"]["test"] == [
        "CMD-SHELL",
        "redis-cli ping | grep -q PONG",
    ]


def test_the_api_and_workers_wait_for_healthy_stores_the_migrations_and_the_bucket(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]

    for name in APPS:
        depends = services[name]["depends_on"]
        assert {depends[s]["condition"] for s in STORES} == {"service_healthy"}, name
        assert {depends[s]["condition"] for s in ONE_OFF} == {"service_completed_successfully"}
    # A condition is only as good as what it waits on.
    for name, service in services.items():
        for other, needs in service.get("depends_on", {}).items():
            if needs["condition"] == "service_healthy":
                assert "healthcheck" in services[other], (name, other)
            elif needs["condition"] == "service_completed_successfully":
                assert other in ONE_OFF, (name, other)


def test_the_gpu_host_runs_one_torch_worker_on_a_gpu_from_urls_alone(
    gpu_compose: dict[str, Any],
) -> None:
    (name,) = gpu_compose["services"]
    worker = gpu_compose["services"][name]

    assert worker["command"] == ["marlforge", "worker", "--backend", "torch", "--gpu"]
    assert worker["build"]["args"] == {
        "EXTRAS": "torch",
        "TORCH_INDEX_URL": "${MARLFORGE_TORCH_INDEX_URL:-}",  # empty: PyPI's CUDA build
    }
    (device,) = worker["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    assert _interpolate(device["device_ids"], {}) == ["0"]
    # Nothing from the deployment's host but what the env file names: no volume, no other service.
    assert "depends_on" not in worker and "volumes" not in worker
    assert worker["env_file"] == ["gpu-worker.env"]
    assert set(_env_file(DOCKER / "gpu-worker.env.example")) == {
        "MARLFORGE_DATABASE_URL",
        "MARLFORGE_BROKER_URL",
        "MARLFORGE_ARTIFACTS_URL",
        "MARLFORGE_S3_ENDPOINT_URL",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
    }


def _image_env() -> dict[str, str]:
    """The ``ENV`` the Dockerfile gives every process."""
    text = re.sub(r"\\\n", " ", (DOCKER / "Dockerfile").read_text())
    pairs = [
        p for line in re.findall(r"^ENV (.+)$", text, flags=re.MULTILINE) for p in line.split()
    ]
    return dict(p.split("=", 1) for p in pairs)


def _settings(env: Mapping[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    with monkeypatch.context() as patch:
        for key in list(os.environ):
            if key.startswith(("MARLFORGE_", "AWS_")):
                patch.delenv(key)
        for key, value in env.items():
            patch.setenv(key, value)
        return Settings()


def test_every_service_environment_is_settings_the_application_accepts(
    compose: dict[str, Any],
    gpu_compose: dict[str, Any],
    dotenv: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    services = _interpolate(compose["services"], dotenv)
    gpu = _interpolate(gpu_compose["services"]["worker-torch-gpu"], {})
    environments = {name: services[name]["environment"] for name in (*APPS, "migrate")}
    environments["worker-torch-gpu"] = {
        **_env_file(DOCKER / "gpu-worker.env.example"),
        **gpu["environment"],
    }

    for name, env in environments.items():
        settings = _settings({**_image_env(), **env}, monkeypatch)
        assert settings.artifacts_url == f"s3://{BUCKET}/artifacts", name
        assert settings.database_url.startswith("postgresql+psycopg://marlforge:"), name
        assert settings.broker_url.startswith("redis://:"), name
        assert settings.var_dir == Path("/var/lib/marlforge"), name
    assert _settings({**_image_env(), **environments["api"]}, monkeypatch).secret_key


def test_the_dockerfile_builds_each_worker_from_its_extra() -> None:
    dockerfile = (DOCKER / "Dockerfile").read_text()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())

    assert "ARG EXTRAS" in dockerfile and 'requirements.py pyproject.toml "$EXTRAS"' in dockerfile
    assert {b.value for b in Backend} <= set(pyproject["project"]["optional-dependencies"])


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
