"""Policy-only exports of checkpoints (``learners.exports``), made by this API process at each
request from the stored checkpoint: fetched into this host's cache and checked against its
sha256, exported with NumPy, safetensors and ONNX's helpers alone (the API imports no
deep-learning framework), hashed, streamed, then deleted. At most ``MAX_PARALLEL_EXPORTS`` run at
once, so a burst of requests for checkpoints with large replay buffers cannot fill the host's
disk."""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

from api.errors import ApiError
from core.models import Checkpoint
from core.storage import ArtifactStore, ObjectCorrupt, ObjectMissing, StoreError, verified_copy
from core.storage.base import hash_file
from learners.api import CheckpointError, export_onnx, export_policy

MAX_PARALLEL_EXPORTS = 2
"""Exports at once per API process: each holds a copy of the whole checkpoint while it runs."""

SUFFIXES = {"safetensors": "policy.safetensors", "onnx": "policy.onnx"}
"""Each export format's file name ending."""


@dataclass(frozen=True)
class ExportedFile:
    """A policy-only export on this host's disk, to stream and then delete."""

    path: Path
    size: int
    sha256: str
    tensors: int


class PolicyExporter:
    """Makes policy-only exports for one API process."""

    def __init__(self, storage: ArtifactStore) -> None:
        self.storage = storage
        self._slots = threading.BoundedSemaphore(MAX_PARALLEL_EXPORTS)

    def export(self, checkpoint: Checkpoint, format: str = "safetensors") -> ExportedFile:  # noqa: A002
        """The export of ``checkpoint`` in ``format`` (``SUFFIXES``' keys); an ``ApiError``
        saying why there is none."""
        work = self.storage.cache_dir / "exports"
        work.mkdir(parents=True, exist_ok=True)
        name = uuid.uuid4().hex
        source, target = work / f"{name}.ckpt", work / f"{name}.{SUFFIXES[format]}"
        what = f"checkpoint {checkpoint.id}"
        with self._slots:
            try:
                verified_copy(self.storage, checkpoint.path, checkpoint.sha256, source)
                if format == "onnx":
                    tensors = len(export_onnx(source, target).tensors)
                else:
                    tensors = len(export_policy(source, target).tensors)
            except ObjectMissing:
                raise ApiError(
                    404, "file_missing", f"the file of {what} is missing from the artifact storage"
                ) from None
            except ObjectCorrupt:
                raise ApiError(
                    410, "file_corrupt", f"the file of {what} does not match its recorded sha256"
                ) from None
            except StoreError as exc:
                raise ApiError(
                    503, "storage_unavailable", f"the artifact storage cannot be read: {exc}"
                ) from None
            except CheckpointError as exc:
                target.unlink(missing_ok=True)
                raise ApiError(409, "export_failed", f"{what} cannot be exported: {exc}") from None
            finally:
                source.unlink(missing_ok=True)
        try:
            size, sha256 = hash_file(target)
        except BaseException:
            target.unlink(missing_ok=True)
            raise
        return ExportedFile(target, size, sha256, tensors)
