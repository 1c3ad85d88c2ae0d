"""Artifact storage: one interface (``ArtifactStore``), a directory or an S3-compatible bucket
behind it, chosen by ``MARLFORGE_ARTIFACTS_URL`` (``file:///path`` or ``s3://bucket/prefix``).

Database rows hold keys relative to the store. ``verified_copy`` is how a host that did not write
an artifact gets a local copy it can trust (a worker resuming another worker's run, the API
rendering a replay).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from core.storage.base import (
    CHUNK,
    ArtifactStore,
    ObjectCorrupt,
    ObjectMissing,
    StoredObject,
    StoreError,
    UploadFailed,
    checkpoint_key,
    checkpoint_prefix,
    hash_file,
    replay_key,
)
from core.storage.filesystem import FilesystemStore

if TYPE_CHECKING:
    from core.settings import Settings

ArtifactStorage = FilesystemStore
"""The filesystem store's name before ``core.storage`` had two (still imported by some tests)."""

__all__ = [
    "CHUNK",
    "ArtifactStorage",
    "ArtifactStore",
    "FilesystemStore",
    "ObjectCorrupt",
    "ObjectMissing",
    "StoreError",
    "StoredObject",
    "UploadFailed",
    "checkpoint_key",
    "checkpoint_prefix",
    "open_store",
    "replay_key",
    "store_for",
    "verified_copy",
]


def open_store(
    url: str,
    *,
    cache_dir: Path,
    endpoint_url: str | None = None,
    public_endpoint_url: str | None = None,
) -> ArtifactStore:
    """The store at ``url``: ``file:///abs/path`` or ``s3://bucket/prefix`` (its endpoint, and the
    one clients reach it at for presigned URLs when that differs)."""
    if url.startswith("file://"):
        from urllib.parse import unquote, urlparse

        return FilesystemStore(Path(unquote(urlparse(url).path)), cache_dir)
    if url.startswith("s3://"):
        from core.storage.s3 import S3Store  # boto3 is loaded only by deployments that use it

        return S3Store(
            url,
            endpoint_url=endpoint_url,
            public_endpoint_url=public_endpoint_url,
            cache_dir=cache_dir,
        )
    raise ValueError(f"{url!r}: the artifact store must be a file:// or s3:// URL")


def store_for(settings: Settings) -> ArtifactStore:
    """The deployment's store; this host's copies under ``<var_dir>/cache``."""
    return open_store(
        settings.artifacts_url,
        cache_dir=settings.var_dir / "cache",
        endpoint_url=settings.s3_endpoint_url or None,
        public_endpoint_url=settings.s3_public_endpoint_url or None,
    )


def verified_copy(store: ArtifactStore, key: str, sha256: str, dest: Path) -> None:
    """Download ``key`` to ``dest`` and check it against the ``sha256`` its record holds; a copy
    that does not match is deleted and ``ObjectCorrupt`` raised (``ObjectMissing`` when there is
    no object, ``StoreError`` when the store cannot be read)."""
    store.download(key, dest)
    try:
        _, actual = hash_file(dest)
    except BaseException:
        dest.unlink(missing_ok=True)
        raise
    if actual != sha256:
        dest.unlink(missing_ok=True)
        raise ObjectCorrupt(store.locate(key), sha256, actual)
