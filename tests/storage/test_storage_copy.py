"""``marlforge storage copy`` (the operator's command, run as a process): a deployment's artifacts
move from a directory to a bucket of a real S3 server, each sha256 verified against its record;
a second run copies nothing; a corrupt object is reported and not copied."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import sessionmaker

from core.db import make_engine, make_session_factory
from core.dispatch.queue import CeleryDispatcher
from core.experiments import service as experiments
from core.experiments.checkpoints import CheckpointRepository
from core.settings import Settings
from core.storage import ArtifactStore, checkpoint_key, open_store, replay_key
from learners.admission.parse import parse_spec
from tests.auth_support import default_project_id
from tests.conftest import migrated_database
from tests.s3_support import MotoServer

pytestmark = pytest.mark.integration


@pytest.fixture
def database_url() -> Iterator[str]:
    """A migrated database of the test's own: the copy reads every checkpoint row in it."""
    with migrated_database("marlforge_copy") as url:
        yield url


def _deployment(
    database_url: str, source: ArtifactStore, tmp_path: Path, spec: dict[str, Any]
) -> dict[str, str]:
    """Two checkpoints (recorded) and a replay GIF (not a row) in ``source``; their keys and
    sha256s."""
    engine = make_engine(database_url)
    sessions: sessionmaker[Any] = make_session_factory(engine)
    dispatcher = CeleryDispatcher(
        Settings(var_dir=tmp_path / "var", database_url=database_url, queue_prefix="copy.")
    )
    objects: dict[str, str] = {}
    with sessions() as session:
        run = experiments.submit(session, dispatcher, parse_spec(spec), default_project_id(session))
        for step in (200, 400):
            key = checkpoint_key(run.id, step)
            stored = source.put(key, lambda p, s=step: p.write_bytes(f"weights {s}".encode() * 999))
            CheckpointRepository(session).record(
                run.id, step, key, stored.size_bytes, stored.sha256
            )
            objects[key] = stored.sha256
        replay = source.put(
            replay_key(run.id, "01JREPLAY0000000000000000", "ab" * 32),
            lambda p: p.write_bytes(b"GIF89a" * 100),
        )
        objects[replay_key(run.id, "01JREPLAY0000000000000000", "ab" * 32)] = replay.sha256
        session.commit()
    engine.dispose()
    return objects


def _copy(env: dict[str, str], destination: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).with_name("marlforge")), "storage", "copy", "--to", destination],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_storage_copy_moves_a_directory_to_a_bucket_verified_and_reports_corruption(
    database_url: str,
    tmp_path: Path,
    s3_server: MotoServer,
    s3_url: str,
    tiny_spec: Callable[..., dict[str, Any]],
) -> None:
    source_url = (tmp_path / "store").as_uri()
    source = open_store(source_url, cache_dir=tmp_path / "cache")
    objects = _deployment(database_url, source, tmp_path, tiny_spec())
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MARLFORGE_")},
        "MARLFORGE_DATABASE_URL": database_url,
        "MARLFORGE_VAR_DIR": str(tmp_path / "var"),
        "MARLFORGE_ARTIFACTS_URL": source_url,
        "MARLFORGE_S3_ENDPOINT_URL": s3_server.endpoint,
    }

    done = _copy(env, s3_url)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "copied 3 object(s)" in done.stdout and "0 not copied" in done.stdout
    bucket = open_store(s3_url, cache_dir=tmp_path / "cache2", endpoint_url=s3_server.endpoint)
    for key, sha256 in objects.items():
        assert hashlib.sha256(b"".join(bucket.read(key))).hexdigest() == sha256
    again = _copy(env, s3_url)
    assert again.returncode == 0 and "copied 0 object(s)" in again.stdout
    assert "3 already there" in again.stdout

    # A checkpoint whose bytes no longer match its record is reported, never copied.
    corrupt = sorted(k for k in objects if k.endswith(".ckpt"))[0]
    source.put(corrupt, lambda p: p.write_bytes(b"not the weights"))
    fresh = f"s3://{s3_server.new_bucket()}/deploy"
    failed = _copy(env, fresh)
    assert failed.returncode == 1
    assert f"not copied: {source.locate(corrupt)} has sha256" in failed.stdout
    assert "copied 2 object(s)" in failed.stdout
    elsewhere = open_store(fresh, cache_dir=tmp_path / "cache3", endpoint_url=s3_server.endpoint)
    assert elsewhere.stat(corrupt) is None
    assert source.stat(corrupt) is not None  # the source is never changed
