"""Where a run continues from: the checkpoint it resumes from, fetched from the store and checked
against its record, what follows that checkpoint forgotten, and this host's copy cleaned up."""

from __future__ import annotations

import logging
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from core.db import retry_transient
from core.experiments.checkpoints import CheckpointRepository
from core.experiments.repository import ExperimentRepository
from core.metrics.repository import MetricRepository
from core.models import Checkpoint
from core.storage import (
    ArtifactStore,
    ObjectCorrupt,
    ObjectMissing,
    StoreError,
    checkpoint_prefix,
    verified_copy,
)
from workers.runs.hooks import DatabaseHooks

log = logging.getLogger(__name__)


class MissingCheckpoint(RuntimeError):
    """The checkpoint a run must continue from is missing, corrupt or unreadable in the store."""


def resume_copy(storage: ArtifactStore, experiment_id: str) -> Path:
    """This host's copy of the checkpoint a run resumes from (one per run)."""
    return storage.cache_dir / "resume" / f"{experiment_id}.ckpt"


def init_copy(storage: ArtifactStore, experiment_id: str) -> Path:
    """This host's copy of the checkpoint a run warm-starts from (``workers.runs.warm_start``)."""
    return storage.cache_dir / "init" / f"{experiment_id}.ckpt"


def prepare_resume(
    experiment_id: str,
    session_factory: sessionmaker[Session],
    storage: ArtifactStore,
    hooks: DatabaseHooks,
    copy: Path,
) -> Path | None:
    """The local copy of the checkpoint to continue from, downloaded from the store and checked
    against its record; then the metrics and checkpoints after it are forgotten (they will be
    computed again on the same step axis). A checkpoint that is missing, corrupt or unreadable
    fails the run before anything is forgotten: a fault never erases what a run has recorded."""
    storage.remove_partials(checkpoint_prefix(experiment_id))
    latest = retry_transient(
        lambda: _latest_checkpoint(experiment_id, session_factory),
        "finding the checkpoint to resume from",
    )
    if latest is not None:
        _fetch(storage, latest, copy)
        hooks.log(
            "info",
            f"fetched the checkpoint at step {latest.step:,} from {storage.locate(latest.path)} "
            f"({latest.size_bytes:,} bytes, sha256 verified)",
        )
    stale = retry_transient(
        lambda: _forget_after(experiment_id, session_factory, latest),
        "forgetting what follows the checkpoint",
    )
    for row in stale:
        try:
            storage.delete(row.path)
        except StoreError as exc:
            log.warning("experiment %s: %s", experiment_id, exc)  # an orphan, not a fault
    return copy if latest is not None else None


def discard_leftovers(storage: ArtifactStore, experiment_id: str) -> None:
    """Clear what a run's process left when it was killed or died: a checkpoint it was writing is
    a temporary file (or an unfinished upload), never recorded; the copy it resumed from is this
    host's, as is the one it warm-started from (``init_copy``)."""
    resume_copy(storage, experiment_id).unlink(missing_ok=True)
    init_copy(storage, experiment_id).unlink(missing_ok=True)
    try:
        storage.remove_partials(checkpoint_prefix(experiment_id))
    except StoreError as exc:
        log.warning("experiment %s: %s", experiment_id, exc)


def _fetch(storage: ArtifactStore, latest: Checkpoint, copy: Path) -> None:
    at = f"the checkpoint at step {latest.step:,} ({latest.path})"
    fetch_checkpoint(
        storage, latest, copy, at, "so the run cannot continue from it; its records are kept"
    )


def fetch_checkpoint(
    storage: ArtifactStore, row: Checkpoint, copy: Path, at: str, then: str | None = None
) -> None:
    """Copy the checkpoint of ``row`` to ``copy``, checked against its sha256, or
    ``MissingCheckpoint`` saying ``at`` is missing, corrupt or unreadable (and ``then``)."""
    tail = f", {then}" if then else ""
    try:
        verified_copy(storage, row.path, row.sha256, copy)
    except ObjectMissing:
        raise MissingCheckpoint(f"{at} is missing from the artifact storage{tail}") from None
    except ObjectCorrupt as exc:
        raise MissingCheckpoint(
            f"{at} is corrupt in the artifact storage (its sha256 is {exc.actual}, its record "
            f"says {exc.expected}){tail}"
        ) from None
    except StoreError as exc:
        raise MissingCheckpoint(
            f"{at} could not be read: {exc}{'; ' + then if then else ''}"
        ) from None


def _latest_checkpoint(
    experiment_id: str, session_factory: sessionmaker[Session]
) -> Checkpoint | None:
    with session_factory() as session:
        return CheckpointRepository(session).latest(experiment_id)


def _forget_after(
    experiment_id: str, session_factory: sessionmaker[Session], latest: Checkpoint | None
) -> list[Checkpoint]:
    """Delete the checkpoint records and metrics after ``latest`` (everything without one: the
    run starts over); the deleted checkpoint records, whose objects go next."""
    with session_factory() as session:
        checkpoints = CheckpointRepository(session)
        step = latest.step if latest is not None else 0
        stale = checkpoints.after(experiment_id, step)
        checkpoints.delete(stale)
        MetricRepository(session).delete_after(experiment_id, step if latest is not None else -1)
        ExperimentRepository(session).set_progress(
            experiment_id, step, None if latest is not None else {}
        )
        session.commit()
    return stale
