"""The S3 store when the transfer goes wrong: a link cut mid-upload, the server killed mid-upload,
a bucket that refuses. Nothing half-uploaded is ever visible under the key, and the error names the
object and the reason."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from core.storage import UploadFailed, checkpoint_key, checkpoint_prefix
from core.storage.s3 import S3Store, parse_s3_url
from tests.s3_support import MotoServer, free_port

MiB = 1 << 20
PROXY = Path(__file__).with_name("cutting_proxy.py")


def _small_parts(url: str, endpoint: str, cache: Path) -> S3Store:
    # S3's smallest part, so that a test-sized file is a multipart upload of several parts.
    return S3Store(
        url, endpoint_url=endpoint, cache_dir=cache,
        multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB,
    )  # fmt: skip


def _write(size: int) -> object:
    return lambda path: path.write_bytes(os.urandom(size))


def test_urls_name_a_bucket_and_a_prefix() -> None:
    assert parse_s3_url("s3://models/teams/a/") == ("models", "teams/a")
    assert parse_s3_url("s3://models") == ("models", "")
    for bad in ("s3:///prefix", "file:///d", "models/prefix"):
        with pytest.raises(ValueError, match="not an s3://"):
            parse_s3_url(bad)


def test_an_upload_cut_mid_transfer_leaves_no_object_and_its_parts_are_cleaned_up(
    s3_server: MotoServer, s3_url: str, tmp_path: Path
) -> None:
    port = free_port()
    proxy = subprocess.Popen(
        [sys.executable, str(PROXY), str(port), str(s3_server.port), str(12 * MiB)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proxy.stdout is not None and proxy.stdout.readline().strip() == "ready"
        through_proxy = _small_parts(s3_url, f"http://127.0.0.1:{port}", tmp_path / "cache")
        key = checkpoint_key("EXP", 400)

        with pytest.raises(UploadFailed) as failed:
            through_proxy.put(key, _write(30 * MiB))  # type: ignore[arg-type]
    finally:
        proxy.kill()
        proxy.wait()

    assert str(failed.value).startswith(f"upload to {through_proxy.locate(key)} failed: ")
    direct = _small_parts(s3_url, s3_server.endpoint, tmp_path / "cache")
    assert direct.stat(key) is None
    assert direct.list("") == []
    bucket = direct.bucket
    # The parts that reached the store before the cut are an unfinished upload: invisible, and
    # aborted by the next cleanup of the run's prefix (a resume does it first).
    unfinished = s3_server.client().list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    assert [u["Key"] for u in unfinished] == [f"deploy/{key}"]
    assert direct.remove_partials(checkpoint_prefix("EXP")) == 1
    assert s3_server.client().list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert list((tmp_path / "cache").rglob("*.part")) == []


def test_a_server_killed_mid_upload_fails_the_put_with_the_object_and_the_reason(
    tmp_path: Path, aws_env: None
) -> None:
    server = MotoServer(tmp_path)
    server.start()
    try:
        store = _small_parts(f"s3://{server.new_bucket()}/deploy", server.endpoint, tmp_path / "c")
        key = checkpoint_key("EXP", 400)
        errors: list[BaseException] = []

        def upload() -> None:
            try:
                store.put(key, _write(80 * MiB))  # type: ignore[arg-type]
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=upload)
        thread.start()
        client = server.client()
        deadline = time.monotonic() + 60
        while not client.list_multipart_uploads(Bucket=store.bucket).get("Uploads"):
            assert time.monotonic() < deadline and thread.is_alive(), "no upload began"
            time.sleep(0.005)
        server.kill()
        started = time.monotonic()
        thread.join(timeout=120)
    finally:
        server.stop()

    assert not thread.is_alive() and time.monotonic() - started < 60
    assert len(errors) == 1 and isinstance(errors[0], UploadFailed), errors
    assert str(errors[0]).startswith(f"upload to {store.locate(key)} failed: ")
    assert list((tmp_path / "c").rglob("*.part")) == []


def test_an_upload_the_store_refuses_names_the_object_and_the_reason(
    s3_server: MotoServer, tmp_path: Path
) -> None:
    store = S3Store(
        "s3://no-such-bucket/deploy", endpoint_url=s3_server.endpoint, cache_dir=tmp_path
    )
    key = checkpoint_key("EXP", 200)

    with pytest.raises(UploadFailed) as failed:
        store.put(key, _write(1000))  # type: ignore[arg-type]

    assert failed.value.url == "s3://no-such-bucket/deploy/" + key
    assert "NoSuchBucket" in failed.value.reason
