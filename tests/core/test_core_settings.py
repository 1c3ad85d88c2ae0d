"""Settings: embedded defaults under the var folder, overrides from MARLFORGE_* variables."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from core.settings import Settings


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    import os

    for key in [k for k in os.environ if k.startswith("MARLFORGE_")]:
        monkeypatch.delenv(key)
    return monkeypatch


def test_defaults_keep_everything_under_the_var_folder(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env.chdir(tmp_path)

    settings = Settings()

    var = (tmp_path / "var").resolve()
    assert settings.var_dir == var
    assert settings.database_url == f"sqlite:///{var / 'marlforge.db'}"
    assert settings.broker_url == "filesystem://" and settings.uses_embedded_broker
    assert settings.broker_dir == var / "broker"
    assert settings.artifacts_dir == var / "artifacts"
    assert settings.artifacts_url == (var / "artifacts").as_uri()
    assert (settings.api_host, settings.api_port) == ("127.0.0.1", 8000)


def test_environment_variables_override_the_defaults(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env.setenv("MARLFORGE_VAR_DIR", str(tmp_path / "state"))
    clean_env.setenv("MARLFORGE_DATABASE_URL", "postgresql+psycopg://db/marlforge")
    clean_env.setenv("MARLFORGE_BROKER_URL", "redis://redis:6379/0")
    clean_env.setenv("MARLFORGE_QUEUE_PREFIX", "prod.")
    clean_env.setenv("MARLFORGE_RUN_TIME_LIMIT_S", "7200")

    settings = Settings()

    assert settings.database_url == "postgresql+psycopg://db/marlforge"
    assert not settings.uses_embedded_broker
    assert settings.artifacts_dir == (tmp_path / "state" / "artifacts").resolve()
    assert settings.queue_prefix == "prod."
    # The broker must never hand a run to a second worker while the first may still train it.
    assert settings.visibility_timeout_s > settings.run_time_limit_s == 7200


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MARLFORGE_API_PORT", "0"),
        ("MARLFORGE_QUEUE_PREFIX", "a b"),
        ("MARLFORGE_POLL_INTERVAL_S", "-1"),
        ("MARLFORGE_RUN_TIME_LIMIT_S", "soon"),
        ("MARLFORGE_ARTIFACTS_URL", "ftp://host/artifacts"),
        ("MARLFORGE_ARTIFACTS_URL", "file://relative/path"),
        ("MARLFORGE_ARTIFACTS_URL", "s3:///no-bucket"),
    ],
)
def test_bad_values_are_refused(clean_env: pytest.MonkeyPatch, name: str, value: str) -> None:
    clean_env.setenv(name, value)
    with pytest.raises(ValidationError):
        Settings()


def test_the_artifact_store_is_a_directory_url_a_bucket_url_or_the_directory_shortcut(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env.setenv("MARLFORGE_VAR_DIR", str(tmp_path / "var"))
    shortcut = Settings(artifacts_dir=tmp_path / "shared")
    by_url = Settings(artifacts_url=(tmp_path / "shared").as_uri())
    bucket = Settings(artifacts_url="s3://models/marlforge", s3_endpoint_url="http://minio:9000")

    assert shortcut.artifacts_url == by_url.artifacts_url == (tmp_path / "shared").as_uri()
    assert by_url.artifacts_dir == tmp_path / "shared"
    assert (bucket.artifacts_url, bucket.s3_endpoint_url) == (
        "s3://models/marlforge",
        "http://minio:9000",
    )
    with pytest.raises(ValidationError, match="not both"):
        Settings(artifacts_url="s3://models/marlforge", artifacts_dir=tmp_path / "shared")
    with pytest.raises(ValidationError, match="not both"):
        Settings(artifacts_url=(tmp_path / "a").as_uri(), artifacts_dir=tmp_path / "b")
