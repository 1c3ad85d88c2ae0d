"""The artifact store as a directory (``file:///path``): the embedded default under ``./var``.

An object is written to a temporary file beside its final name, flushed to disk, hashed and then
renamed into place, so a reader (or a crash) only ever sees a whole file or none. Every process
that uses the store must see the same directory; workers on other machines need ``s3.py``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from core.storage.base import (
    CHUNK,
    TEMP_PREFIX,
    ObjectMissing,
    StoredObject,
    StoreError,
    check_key,
    check_prefix,
    checkpoint_prefix,
    written,
)


def _fsync_dir(path: Path) -> None:
    # The rename is durable only once the directory entry is on disk.
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FilesystemStore:
    """Objects as files under ``root``; keys are their paths relative to it."""

    def __init__(self, root: Path, cache_dir: Path | None = None) -> None:
        """``cache_dir``: this host's local copies; by default ``cache`` beside ``root``."""
        self.root = root.resolve()
        self.cache_dir = (cache_dir or self.root.parent / "cache").resolve()
        self.url = self.root.as_uri()

    def locate(self, key: str) -> str:
        return self.resolve(key).as_uri()

    def resolve(self, key: str) -> Path:
        """The file that holds ``key``; refuses keys that would leave the root."""
        path = (self.root / check_key(key)).resolve()
        if not path.is_relative_to(self.root):
            raise ValueError(f"{key!r} is outside the artifact store")
        return path

    def checkpoint_dir(self, experiment_id: str) -> Path:
        """The folder of an experiment's checkpoints."""
        return self.root / checkpoint_prefix(experiment_id)

    def put(self, key: str, write: Callable[[Path], None]) -> StoredObject:
        final = self.resolve(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        fd, temp_name = tempfile.mkstemp(dir=final.parent, prefix=TEMP_PREFIX, suffix=".part")
        os.close(fd)
        temp = Path(temp_name)
        try:
            write(temp)
            size, sha256 = written(temp)
            os.replace(temp, final)
            _fsync_dir(final.parent)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        return StoredObject(key, size, sha256)

    def stat(self, key: str) -> int | None:
        path = self.resolve(key)
        return path.stat().st_size if path.is_file() else None

    def read(self, key: str, start: int = 0, stop: int | None = None) -> Iterator[bytes]:
        handle = self._open(key)
        handle.seek(start)
        return _chunks(handle, None if stop is None else stop - start)

    def download(self, key: str, dest: Path) -> None:
        with self._open(key) as source:
            dest.parent.mkdir(parents=True, exist_ok=True)
            temp = dest.with_name(f"{TEMP_PREFIX}{dest.name}")
            try:
                with temp.open("wb") as out:
                    shutil.copyfileobj(source, out, CHUNK)
                os.replace(temp, dest)
            except BaseException:
                temp.unlink(missing_ok=True)
                raise

    def delete(self, key: str) -> None:
        self.resolve(key).unlink(missing_ok=True)

    def list(self, prefix: str) -> list[str]:
        folder = self.root / check_prefix(prefix)
        if not folder.is_dir():
            return []
        return sorted(
            p.relative_to(self.root).as_posix()
            for p in folder.rglob("*")
            if p.is_file() and not p.name.startswith(TEMP_PREFIX)
        )

    def remove_partials(self, prefix: str) -> int:
        folder = self.root / check_prefix(prefix)
        if not folder.is_dir():
            return 0
        removed = 0
        for leftover in folder.rglob(f"{TEMP_PREFIX}*"):
            leftover.unlink(missing_ok=True)
            removed += 1
        return removed

    def unreachable_reason(self) -> str | None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return f"{self.url} cannot be created: {exc}"
        if not os.access(self.root, os.W_OK | os.X_OK):
            return f"{self.url} is not writable"
        return None

    def create(self) -> str:
        if self.root.is_dir():
            return f"directory {self.root} exists"
        try:
            self.root.mkdir(parents=True)
        except OSError as exc:
            raise StoreError(f"could not create {self.url}: {exc}") from exc
        return f"created directory {self.root}"

    def presign(self, key: str, *, sha256: str, expires_s: int, filename: str | None) -> None:
        return None  # a directory has no URL of its own: the API streams it

    def _open(self, key: str) -> BinaryIO:
        try:
            return self.resolve(key).open("rb")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise ObjectMissing(f"no object at {self.locate(key)}") from None


def _chunks(handle: BinaryIO, length: int | None) -> Iterator[bytes]:
    with handle:
        left = length
        while left is None or left > 0:
            chunk = handle.read(CHUNK if left is None else min(CHUNK, left))
            if not chunk:
                return
            if left is not None:
                left -= len(chunk)
            yield chunk
