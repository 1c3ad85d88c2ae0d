"""What every artifact store promises (``core.storage.base.ArtifactStore``), checked on each: whole
or nothing, size and sha256 known before an object is visible, streaming and ranged reads, missing
keys, deletes and the cleanup of what dead writers left."""

from __future__ import annotations

import hashlib
import os
import pickle
from pathlib import Path

import pytest

from core.storage import (
    CHUNK,
    ArtifactStore,
    FilesystemStore,
    ObjectCorrupt,
    ObjectMissing,
    StoredObject,
    checkpoint_key,
    checkpoint_prefix,
    verified_copy,
)
from core.storage.base import TEMP_PREFIX
from core.storage.s3 import S3Store

KEY = checkpoint_key("EXP", 500)


def _data(size: int) -> bytes:
    return os.urandom(size)


def _put(store: ArtifactStore, key: str, data: bytes) -> StoredObject:
    return store.put(key, lambda path: path.write_bytes(data))


def _leftovers(store: ArtifactStore) -> list[Path]:
    """Files on this host that an upload or a copy left behind."""
    places = [store.cache_dir]
    if isinstance(store, FilesystemStore):
        places.append(store.root)
    return [p for place in places if place.exists() for p in place.rglob(f"{TEMP_PREFIX}*")]


def _leave_partial(store: ArtifactStore, key: str) -> None:
    """What a writer killed mid-write leaves: a temporary file (a directory), an unfinished
    multipart upload and its local file (a bucket)."""
    if isinstance(store, FilesystemStore):
        path = store.resolve(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.with_name(f"{TEMP_PREFIX}killed.part").write_bytes(b"half")
        return
    assert isinstance(store, S3Store)
    client = store._client()
    client.create_multipart_upload(Bucket=store.bucket, Key=f"{store.prefix}/{key}")
    scratch = store.cache_dir / "uploads" / key
    scratch.parent.mkdir(parents=True, exist_ok=True)
    scratch.with_name(f"{TEMP_PREFIX}killed.part").write_bytes(b"half")


def _partials(store: ArtifactStore) -> int:
    if isinstance(store, S3Store):
        uploads = store._client().list_multipart_uploads(Bucket=store.bucket)
        return len(uploads.get("Uploads", [])) + len(_leftovers(store))
    return len(_leftovers(store))


def test_an_object_round_trips_with_its_size_and_sha256(
    store: ArtifactStore, tmp_path: Path
) -> None:
    data = _data(3 * CHUNK + 17)

    stored = _put(store, KEY, data)

    assert stored == StoredObject(KEY, len(data), hashlib.sha256(data).hexdigest())
    assert store.stat(KEY) == len(data)
    assert b"".join(store.read(KEY)) == data
    store.download(KEY, tmp_path / "copy")
    assert (tmp_path / "copy").read_bytes() == data
    assert store.list(checkpoint_prefix("EXP")) == [KEY]
    assert store.locate(KEY).startswith(store.url + "/") and store.locate(KEY).endswith(KEY)
    assert _leftovers(store) == []


def test_a_writer_that_fails_leaves_nothing_and_the_old_object_whole(store: ArtifactStore) -> None:
    earlier = _data(1000)
    _put(store, KEY, earlier)

    def crash(path: Path) -> None:
        path.write_bytes(b"partial")
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError, match="killed mid-write"):
        store.put(KEY, crash)
    with pytest.raises(RuntimeError, match="killed mid-write"):
        store.put(checkpoint_key("EXP", 600), crash)
    with pytest.raises(RuntimeError, match="wrote nothing"):
        store.put(checkpoint_key("EXP", 700), lambda path: None)

    assert b"".join(store.read(KEY)) == earlier
    assert store.stat(checkpoint_key("EXP", 600)) is None
    assert store.list("experiments/") == [KEY]
    assert _partials(store) == 0


def test_reads_stream_in_bounded_chunks_and_ranges(store: ArtifactStore) -> None:
    data = _data(5 * CHUNK + 3)
    _put(store, KEY, data)

    chunks = list(store.read(KEY))

    assert len(chunks) >= 6 and all(0 < len(c) <= CHUNK for c in chunks)
    assert b"".join(chunks) == data
    assert b"".join(store.read(KEY, 5, 10)) == data[5:10]
    assert b"".join(store.read(KEY, len(data) - 4)) == data[-4:]
    assert b"".join(store.read(KEY, CHUNK - 1, 2 * CHUNK + 1)) == data[CHUNK - 1 : 2 * CHUNK + 1]


def test_a_missing_key_is_none_or_object_missing(store: ArtifactStore, tmp_path: Path) -> None:
    missing = checkpoint_key("NONE", 1)

    assert store.stat(missing) is None
    with pytest.raises(ObjectMissing):
        store.read(missing)
    with pytest.raises(ObjectMissing):
        store.download(missing, tmp_path / "copy")
    assert not (tmp_path / "copy").exists()
    store.delete(missing)  # nothing to delete is not an error
    assert store.list("experiments/NONE/") == []


def test_a_deleted_object_is_gone(store: ArtifactStore) -> None:
    _put(store, KEY, b"weights")
    _put(store, checkpoint_key("EXP", 600), b"more weights")

    store.delete(KEY)

    assert store.stat(KEY) is None
    assert store.list(checkpoint_prefix("EXP")) == [checkpoint_key("EXP", 600)]


def test_a_copy_is_verified_against_its_sha256(store: ArtifactStore, tmp_path: Path) -> None:
    stored = _put(store, KEY, b"weights")

    verified_copy(store, KEY, stored.sha256, tmp_path / "good")
    with pytest.raises(ObjectCorrupt, match="not the recorded"):
        verified_copy(store, KEY, "0" * 64, tmp_path / "bad")

    assert (tmp_path / "good").read_bytes() == b"weights"
    assert not (tmp_path / "bad").exists()


def test_prefix_cleanup_removes_what_dead_writers_left_and_nothing_else(
    store: ArtifactStore,
) -> None:
    _put(store, KEY, b"kept")
    _leave_partial(store, checkpoint_key("EXP", 600))
    _leave_partial(store, checkpoint_key("OTHER", 1))

    removed = store.remove_partials(checkpoint_prefix("EXP"))

    assert removed == (1 if isinstance(store, FilesystemStore) else 2)
    assert store.list("experiments/") == [KEY]
    assert b"".join(store.read(KEY)) == b"kept"
    assert _partials(store) == (1 if isinstance(store, FilesystemStore) else 2)  # OTHER's
    assert store.remove_partials(checkpoint_prefix("EXP")) == 0


def test_keys_cannot_leave_the_store(store: ArtifactStore) -> None:
    for key in ("../outside", "/etc/passwd", "experiments/../../x", ""):
        with pytest.raises(ValueError, match="not a key"):
            store.stat(key)
    with pytest.raises(ValueError, match="not a key"):
        _put(store, "experiments/../../escape", b"x")


def test_a_store_reopens_from_a_pickle_in_another_process(store: ArtifactStore) -> None:
    # A run's process receives the store pickled (``workers.runs.job.RunJob``).
    _put(store, KEY, b"weights")

    again: ArtifactStore = pickle.loads(pickle.dumps(store))

    assert again.url == store.url and again.cache_dir == store.cache_dir
    assert b"".join(again.read(KEY)) == b"weights"


def test_a_usable_store_is_ready(store: ArtifactStore) -> None:
    assert store.unreachable_reason() is None
