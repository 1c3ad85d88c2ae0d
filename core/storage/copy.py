"""``marlforge storage copy``: move a deployment's artifacts from one store to another (a
directory to a bucket, say), verifying every object.

Every object under ``experiments/`` in the source is copied under the same key (keys are relative
to the store, so the database rows stay as they are). Each is downloaded to this host, hashed, and
uploaded; a checkpoint's sha256 must equal the one its database row promises, and every other
object's (replay GIFs) the one of the bytes read. An object whose bytes do not match its record is
not copied and is reported; so is a recorded checkpoint the source does not have. The copy is safe
to run again: an object already in the destination with the recorded size and hash is left as it
is. Nothing in the source is changed or deleted.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from core.experiments.checkpoints import CheckpointRepository
from core.storage.base import ArtifactStore, ObjectMissing, hash_file

PREFIX = "experiments/"


@dataclass
class CopyReport:
    """What ``copy_store`` did."""

    copied: list[str] = field(default_factory=list)
    already_there: list[str] = field(default_factory=list)
    bytes_copied: int = 0
    problems: list[str] = field(default_factory=list)
    """One sentence per object that was not copied (corrupt, or recorded but missing)."""


def copy_store(
    source: ArtifactStore, destination: ArtifactStore, session_factory: sessionmaker[Session]
) -> CopyReport:
    """Copy every object of ``source`` to ``destination`` (see the module's docstring)."""
    with session_factory() as session:
        recorded = {path: sha256 for path, sha256 in CheckpointRepository(session).all_hashes()}
    report = CopyReport()
    work = source.cache_dir / "copy"
    work.mkdir(parents=True, exist_ok=True)
    keys = source.list(PREFIX)
    for key in keys:
        _copy_one(source, destination, key, recorded.get(key), work / "object", report)
    for key in sorted(set(recorded) - set(keys)):
        report.problems.append(f"{source.locate(key)} is recorded but not in the source")
    shutil.rmtree(work, ignore_errors=True)
    return report


def _copy_one(
    source: ArtifactStore,
    destination: ArtifactStore,
    key: str,
    expected: str | None,
    local: Path,
    report: CopyReport,
) -> None:
    try:
        source.download(key, local)
    except ObjectMissing:
        report.problems.append(f"{source.locate(key)} went away during the copy")
        return
    size, sha256 = hash_file(local)
    if expected is not None and sha256 != expected:
        report.problems.append(
            f"{source.locate(key)} has sha256 {sha256}, not the recorded {expected}: not copied"
        )
        return
    if _holds(destination, key, size, sha256, local.with_suffix(".there")):
        report.already_there.append(key)
        return

    def write(path: Path) -> None:
        shutil.copyfile(local, path)

    stored = destination.put(key, write)
    if stored.sha256 != sha256:
        report.problems.append(f"{destination.locate(key)} does not hold what the source has")
        return
    report.copied.append(key)
    report.bytes_copied += size


def _holds(store: ArtifactStore, key: str, size: int, sha256: str, local: Path) -> bool:
    """True when ``store`` has these bytes under ``key`` already (a copy run again)."""
    if store.stat(key) != size:
        return False
    store.download(key, local)
    try:
        return hash_file(local)[1] == sha256
    finally:
        local.unlink(missing_ok=True)
