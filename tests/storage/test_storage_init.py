"""``marlforge storage init`` (run as the operator runs it) makes a missing bucket on a real S3
server, or a missing directory, and says what it did; a second run finds it there."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

from core.storage import open_store
from tests.s3_support import MotoServer


def _init(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [str(Path(sys.executable).with_name("marlforge")), "storage", "init"]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def _env(tmp_path: Path, url: str, endpoint: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARLFORGE_")}
    env.update({"MARLFORGE_VAR_DIR": str(tmp_path / "var"), "MARLFORGE_ARTIFACTS_URL": url})
    if endpoint is not None:
        env["MARLFORGE_S3_ENDPOINT_URL"] = endpoint
    return env


def test_storage_init_creates_a_missing_bucket_once(tmp_path: Path, s3_server: MotoServer) -> None:
    bucket = f"fresh-{secrets.token_hex(4)}"
    url = f"s3://{bucket}/deploy"
    store = open_store(url, cache_dir=tmp_path / "cache", endpoint_url=s3_server.endpoint)
    assert store.unreachable_reason() == (
        f"bucket {bucket!r} does not exist at {s3_server.endpoint}"
    )
    env = _env(tmp_path, url, s3_server.endpoint)

    first = _init(env)
    second = _init(env)

    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == f"{url}: created bucket {bucket!r}"
    assert second.returncode == 0 and second.stdout.strip() == f"{url}: bucket {bucket!r} exists"
    assert store.unreachable_reason() is None


def test_storage_init_creates_a_missing_directory(tmp_path: Path) -> None:
    folder = tmp_path / "artifacts" / "deep"
    env = _env(tmp_path, folder.as_uri())

    done = _init(env)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{folder.as_uri()}: created directory {folder}"
    assert folder.is_dir()
    assert _init(env).stdout.strip() == f"{folder.as_uri()}: directory {folder} exists"
