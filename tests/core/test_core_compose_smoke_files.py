"""The override files of scripts/compose-smoke.sh (docker/smoke/) swap only what a machine
without an image registry cannot have: the stores' images and MinIO's own commands, the base image,
PyTorch's wheel index and the network. These checks hold them to that, so the smoke run keeps
running the compose file's own health checks, restart policies, start order, jobs, secrets and
volumes. The run itself is tests/e2e/test_e2e_compose_smoke.py."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
SMOKE = DOCKER / "smoke"


class _Tagged:
    """A value under compose's ``!reset`` or ``!override`` tag."""

    def __init__(self, tag: str, value: Any) -> None:
        self.tag, self.value = tag, value


class _ComposeLoader(yaml.SafeLoader):
    """YAML as compose reads it, with its merge tags kept as _Tagged."""


def _tagged(loader: yaml.SafeLoader, node: yaml.Node) -> _Tagged:
    if isinstance(node, yaml.SequenceNode):
        return _Tagged(node.tag, loader.construct_sequence(node, deep=True))
    if isinstance(node, yaml.MappingNode):
        return _Tagged(node.tag, loader.construct_mapping(node, deep=True))
    return _Tagged(node.tag, loader.construct_scalar(node))


for _tag in ("!reset", "!override"):
    _ComposeLoader.add_constructor(_tag, _tagged)


def _load(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.load(path.read_text(), Loader=_ComposeLoader)  # noqa: S506
    return loaded


URLS = {"MARLFORGE_DATABASE_URL", "MARLFORGE_BROKER_URL", "MARLFORGE_S3_ENDPOINT_URL"}
SWAPPED_BUILD = {"BASE_IMAGE": "${SMOKE_BASE_IMAGE}", "TORCH_INDEX_URL": "${SMOKE_TORCH_INDEX_URL}"}
KEPT = ("healthcheck", "restart", "depends_on", "volumes", "stop_grace_period", "init")


def test_every_service_is_on_the_hosts_network_and_the_stores_play_the_official_images() -> None:
    deployed = yaml.safe_load((DOCKER / "docker-compose.yml").read_text())["services"]
    smoke = _load(SMOKE / "docker-compose.smoke.yml")["services"]

    assert set(smoke) == set(deployed)
    assert {name: s["network_mode"] for name, s in smoke.items()} == dict.fromkeys(smoke, "host")
    for store, port in (("postgres", "PGPORT"), ("redis", "REDIS_PORT"), ("minio", "S3_PORT")):
        assert smoke[store]["image"] == "${SMOKE_STORES_IMAGE}"
        assert smoke[store]["entrypoint"] == [f"standin-{ {'minio': 's3'}.get(store, store) }"]
        assert set(smoke[store]["environment"]) == {port}
    # The compose file's redis command line reaches the stand-in whole (its password included).
    assert "command" not in smoke["redis"] and "command" not in smoke["postgres"]


def test_the_override_keeps_the_compose_files_health_checks_restarts_order_and_volumes() -> None:
    smoke = _load(SMOKE / "docker-compose.smoke.yml")["services"]

    swapped = {name: sorted(k for k in KEPT if k in service) for name, service in smoke.items()}
    # MinIO's health check (`mc ready local`) is MinIO's own: moto answers a plain request.
    assert swapped == {name: (["healthcheck"] if name == "minio" else []) for name in smoke}
    assert {name for name, s in smoke.items() if "command" in s} == {"minio-init"}
    for name in ("migrate", "api", "worker-torch", "worker-tensorflow", "worker-mindspore"):
        assert set(smoke[name]["environment"]) == URLS, name
    # The API's published port means nothing on the host's network; it listens on 8000 there.
    assert isinstance(smoke["api"]["ports"], _Tagged) and smoke["api"]["ports"].tag == "!reset"


def test_the_images_are_the_compose_files_builds_on_another_base_and_wheel_index() -> None:
    deployed = yaml.safe_load((DOCKER / "docker-compose.yml").read_text())["services"]
    smoke = _load(SMOKE / "docker-compose.smoke.yml")["services"]

    builders = {name for name, s in deployed.items() if "build" in s}
    assert {name for name, s in smoke.items() if "build" in s} == builders
    for name in builders:
        build = smoke[name]["build"]
        assert build["args"] == SWAPPED_BUILD, name
        assert build["network"] == "host"
        assert (build["context"], build["dockerfile"]) == (
            deployed[name]["build"]["context"],
            deployed[name]["build"]["dockerfile"],
        )
        assert "image" not in smoke[name] and "pull_policy" not in smoke[name]


def test_the_gpu_hosts_override_drops_only_the_device_reservation_and_swaps_the_env_file() -> None:
    deployed = yaml.safe_load((DOCKER / "docker-compose.gpu-worker.yml").read_text())["services"]
    smoke = _load(SMOKE / "docker-compose.gpu-worker.smoke.yml")["services"]

    assert set(smoke) == set(deployed)
    (worker,) = smoke.values()
    assert set(worker) == {"network_mode", "build", "env_file", "deploy"}
    assert worker["build"]["args"] == SWAPPED_BUILD
    assert (worker["deploy"].tag, worker["deploy"].value) == ("!reset", {})
    assert worker["env_file"].tag == "!override"
    assert worker["env_file"].value == ["${SMOKE_GPU_WORKER_ENV}"]


def test_every_variable_the_overrides_read_is_one_the_script_writes() -> None:
    script = (ROOT / "scripts" / "compose_smoke.py").read_text()
    used = {
        name
        for path in SMOKE.glob("*.yml")
        for name in re.findall(r"\$\{(SMOKE_[A-Z_]+)\}", path.read_text())
    }
    written = set(re.findall(r"\b(SMOKE_[A-Z_]+)(?:\"|=)", script))

    assert used and used <= written, used - written


def test_the_stand_ins_start_the_stores_the_way_the_official_images_do() -> None:
    postgres = (SMOKE / "standin-postgres").read_text()
    redis = (SMOKE / "standin-redis").read_text()

    for variable in ("POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB"):
        assert f"${variable}" in postgres or f'"${variable}"' in postgres
    assert "PGDATA=/var/lib/postgresql/data" in postgres
    assert "--auth-host=scram-sha-256" in postgres  # a password over TCP, as the image's default
    assert 'exec runuser -u redis -- "$@"' in redis  # the compose file's command line, whole
    assert "--bind 127.0.0.1" in redis and "listen_addresses=127.0.0.1" in postgres


def _which(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: the dev extra provides it (make install)")
    return found


def test_hadolint_finds_nothing_in_the_stores_dockerfile() -> None:
    result = subprocess.run(
        [_which("hadolint"), "--no-color", "docker/smoke/stores.Dockerfile"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip

    assert result.returncode == 0, result.stdout + result.stderr


def test_the_stand_in_scripts_are_executable() -> None:
    scripts = [p for p in SMOKE.iterdir() if p.name.startswith("standin-") or p.name == "redis-cli"]

    assert len(scripts) == 5
    assert [p.name for p in scripts if not p.stat().st_mode & 0o111] == []
    assert (ROOT / "scripts" / "compose-smoke.sh").stat().st_mode & 0o111
