"""Artifact storage on a filesystem shared by the API and the workers.

A checkpoint is written to a temporary file beside its final name, flushed to disk, hashed and then
renamed into place, so a reader (or a crash) only ever sees a whole file or none. Records in the
database point at files by a path relative to the storage root, so the root can move.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

_TEMP_PREFIX = ".tmp-"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class StoredFile:
    """A file now in place: its path relative to the storage root, its size and sha256."""

    relative_path: str
    size_bytes: int
    sha256: str


def _fsync_dir(path: Path) -> None:
    # The rename is durable only once the directory entry is on disk.
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _hash_and_sync(path: Path) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
        os.fsync(handle.fileno())
    return size, digest.hexdigest()


class ArtifactStorage:
    """Files of every experiment under ``root/experiments/<id>/``."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def checkpoint_dir(self, experiment_id: str) -> Path:
        """Where an experiment's checkpoints live."""
        return self.root / "experiments" / experiment_id / "checkpoints"

    def write_checkpoint(
        self, experiment_id: str, step: int, write: Callable[[Path], None]
    ) -> StoredFile:
        """Have ``write`` fill a temporary file, then move it atomically to the step's name."""
        folder = self.checkpoint_dir(experiment_id)
        folder.mkdir(parents=True, exist_ok=True)
        fd, temp_name = tempfile.mkstemp(dir=folder, prefix=_TEMP_PREFIX, suffix=".part")
        os.close(fd)
        temp = Path(temp_name)
        try:
            write(temp)
            if not temp.is_file() or temp.stat().st_size == 0:
                raise RuntimeError(f"the checkpoint writer wrote nothing to {temp.name}")
            size, sha256 = _hash_and_sync(temp)
            final = folder / f"step-{step:012d}.ckpt"
            os.replace(temp, final)
            _fsync_dir(folder)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        return StoredFile(final.relative_to(self.root).as_posix(), size, sha256)

    def resolve(self, relative_path: str) -> Path:
        """The absolute path of a stored file; refuses paths that leave the storage root."""
        path = (self.root / relative_path).resolve()
        if not path.is_relative_to(self.root):
            raise ValueError(f"{relative_path!r} is outside the artifact storage")
        return path

    def delete(self, relative_path: str) -> None:
        """Remove a stored file if it is there."""
        self.resolve(relative_path).unlink(missing_ok=True)

    def remove_partials(self, experiment_id: str) -> int:
        """Delete temporary files a crashed writer left behind; returns how many."""
        folder = self.checkpoint_dir(experiment_id)
        if not folder.is_dir():
            return 0
        removed = 0
        for leftover in folder.glob(f"{_TEMP_PREFIX}*"):
            leftover.unlink(missing_ok=True)
            removed += 1
        return removed
