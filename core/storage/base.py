"""What every artifact store promises, whatever holds the bytes (``filesystem.py``, ``s3.py``).

An object is addressed by a key relative to the store (``experiments/<id>/checkpoints/step-...``),
which is what database rows hold, so a deployment can move its store without touching them. A
store writes whole or nothing: ``put`` has the caller fill a local temporary file, knows its size
and sha256 before anything is visible under the key, and leaves neither the object nor a partial
behind when the writer or the transfer fails.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Protocol
from urllib.parse import quote

CHUNK = 1 << 20
"""Bytes read at a time when hashing and streaming."""
TEMP_PREFIX = ".tmp-"
"""Names of files being written; never a key, always safe to delete once their writer is gone."""


@dataclass(frozen=True)
class StoredObject:
    """An object now in the store: its key, its size and its sha256 (hex)."""

    key: str
    size_bytes: int
    sha256: str


class StoreError(OSError):
    """The store could not be reached or refused an operation; the message says which and why."""


class ObjectMissing(StoreError):
    """No object under the key."""


class ObjectCorrupt(StoreError):
    """An object whose bytes are not those its record promises."""

    def __init__(self, url: str, expected: str, actual: str) -> None:
        super().__init__(f"{url} has sha256 {actual}, not the recorded {expected}")
        self.expected = expected
        self.actual = actual


class UploadFailed(StoreError):
    """An upload did not complete (after the client's retries); nothing is under its key."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"upload to {url} failed: {reason}")
        self.url = url
        self.reason = reason


class ArtifactStore(Protocol):
    """A place for a run's artifacts, shared by the API and every worker."""

    url: str
    """``file:///abs/path`` or ``s3://bucket/prefix``."""
    cache_dir: Path
    """This host's folder for local copies (a checkpoint a run resumes from, a replay being
    rendered) and uploads in progress; never shared between hosts."""

    def locate(self, key: str) -> str:
        """The object's full URL, for messages and logs."""
        ...

    def put(self, key: str, write: Callable[[Path], None]) -> StoredObject:
        """Have ``write`` fill a local temporary file, then store it under ``key`` atomically.
        Raises what ``write`` raised, ``OSError`` for a local disk that refuses, and
        ``UploadFailed`` when the store does; nothing is under ``key`` in any of these cases."""
        ...

    def stat(self, key: str) -> int | None:
        """The object's size in bytes; None when there is none."""
        ...

    def read(self, key: str, start: int = 0, stop: int | None = None) -> Iterator[bytes]:
        """The bytes ``[start, stop)`` in chunks of at most ``CHUNK``. The object is opened
        before this returns (``ObjectMissing`` is raised here, not while iterating)."""
        ...

    def download(self, key: str, dest: Path) -> None:
        """Copy the object to the local file ``dest`` (whole, or not at all)."""
        ...

    def delete(self, key: str) -> None:
        """Remove the object; nothing happens when there is none."""
        ...

    def list(self, prefix: str) -> list[str]:
        """The keys under ``prefix``, sorted; partial uploads are not listed."""
        ...

    def remove_partials(self, prefix: str) -> int:
        """Remove what writers that died left under ``prefix`` (temporary files, unfinished
        multipart uploads); returns how many. Only call it when no writer of ``prefix`` lives."""
        ...

    def unreachable_reason(self) -> str | None:
        """None when the store can be used; otherwise why not (for readiness checks)."""
        ...

    def create(self) -> str:
        """Make the store's bucket or directory when it does not exist (``marlforge storage
        init``); a sentence saying what was done. ``StoreError`` when it cannot."""
        ...

    def presign(self, key: str, *, sha256: str, expires_s: int, filename: str | None) -> str | None:
        """A URL that lets anyone holding it GET the object (ranges included) for ``expires_s``
        seconds, with ``filename`` as its download name; None when the store cannot sign (a
        directory). Checks the object is the one recorded with ``sha256`` as far as the store
        can without reading it (``ObjectCorrupt``), ``ObjectMissing`` when there is none."""
        ...


def check_key(key: str) -> str:
    """``key`` when it is a plain relative path; ValueError for one that could leave the store."""
    parts = PurePosixPath(key).parts
    if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"{key!r} is not a key of the artifact store")
    return key


def content_disposition(filename: str) -> str:
    """A ``Content-Disposition`` that downloads as ``filename`` (RFC 6266; RFC 5987 for names
    that are not plain ASCII)."""
    quoted = quote(filename)
    if quoted == filename:
        return f'attachment; filename="{filename}"'
    return f"attachment; filename*=utf-8''{quoted}"


def check_prefix(prefix: str) -> str:
    """``prefix`` when it is empty (the whole store) or a plain relative path."""
    if prefix:
        check_key(prefix.rstrip("/"))
    return prefix


def hash_file(path: Path, *, sync: bool = False) -> tuple[int, str]:
    """The size and sha256 of a local file; with ``sync``, flushed to disk as well."""
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
        if sync:
            os.fsync(handle.fileno())
    return size, digest.hexdigest()


def written(temp: Path) -> tuple[int, str]:
    """The size and sha256 of what a writer put in ``temp``; refuses an empty file (a writer that
    wrote nothing is a bug, never a valid artifact)."""
    if not temp.is_file() or temp.stat().st_size == 0:
        raise RuntimeError(f"the writer wrote nothing to {temp.name}")
    return hash_file(temp, sync=True)


def checkpoint_prefix(experiment_id: str) -> str:
    """Where an experiment's checkpoints are."""
    return f"experiments/{experiment_id}/checkpoints/"


def checkpoint_key(experiment_id: str, step: int) -> str:
    """The key of an experiment's checkpoint at ``step``."""
    return f"{checkpoint_prefix(experiment_id)}step-{step:012d}.ckpt"


def replay_key(experiment_id: str, checkpoint_id: str, sha256: str) -> str:
    """The key of a checkpoint's replay GIF; the checkpoint's sha256 in the name, so a checkpoint
    rewritten at the same step gets a new replay."""
    return f"experiments/{experiment_id}/replays/{checkpoint_id}-{sha256[:16]}.gif"
