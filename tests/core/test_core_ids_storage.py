"""Identifiers and the artifact storage's atomic writes."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from core.ids import is_id, new_id
from core.storage import ArtifactStorage


def test_ids_are_unique_well_formed_and_sort_by_creation() -> None:
    first = [new_id() for _ in range(1000)]
    time.sleep(0.002)
    later = new_id()

    assert len(set(first)) == 1000
    assert all(is_id(i) and len(i) == 26 for i in first)
    assert all(i < later for i in first)
    assert not is_id("01J-not-an-id") and not is_id("u" * 26)


def test_a_checkpoint_is_renamed_into_place_with_its_sha256(tmp_path: Path) -> None:
    storage = ArtifactStorage(tmp_path)
    data = b"weights" * 10_000

    stored = storage.write_checkpoint("EXP", 500, lambda path: path.write_bytes(data))

    assert stored.relative_path == "experiments/EXP/checkpoints/step-000000000500.ckpt"
    assert storage.resolve(stored.relative_path).read_bytes() == data
    assert stored.sha256 == hashlib.sha256(data).hexdigest()
    assert stored.size_bytes == len(data)
    assert [p.name for p in storage.checkpoint_dir("EXP").iterdir()] == ["step-000000000500.ckpt"]


def test_a_failed_or_empty_write_leaves_nothing_behind(tmp_path: Path) -> None:
    storage = ArtifactStorage(tmp_path)

    def crash(path: Path) -> None:
        path.write_bytes(b"partial")
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError, match="killed mid-write"):
        storage.write_checkpoint("EXP", 1, crash)
    with pytest.raises(RuntimeError, match="wrote nothing"):
        storage.write_checkpoint("EXP", 2, lambda path: None)

    assert list(storage.checkpoint_dir("EXP").iterdir()) == []


def test_leftover_temporaries_are_removed_and_paths_cannot_escape(tmp_path: Path) -> None:
    storage = ArtifactStorage(tmp_path)
    folder = storage.checkpoint_dir("EXP")
    folder.mkdir(parents=True)
    (folder / ".tmp-crashed.part").write_bytes(b"x")
    (folder / "step-000000000001.ckpt").write_bytes(b"kept")

    assert storage.remove_partials("EXP") == 1
    assert [p.name for p in folder.iterdir()] == ["step-000000000001.ckpt"]
    with pytest.raises(ValueError, match="outside"):
        storage.resolve("../../etc/passwd")
