"""The checkpoint a warm-started run begins from (``spec.init``): fetched from the store when the
run starts without a checkpoint of its own, checked against its record (sha256), and this host's
copy removed once the run has loaded it. A run that has a checkpoint of its own resumes from it
instead (``workers.runs.resume``): the warm start happened at its first start. A continuation
(``init.what: run``) is handed to ``train`` as a checkpoint to resume (``workers.runs.job``): the
run goes on from the other run's step, with the other run's whole state."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from core.db import retry_transient
from core.experiments.checkpoints import CheckpointRepository
from core.models import Checkpoint
from core.storage import ArtifactStore
from learners.api import ExperimentSpec
from workers.runs.hooks import DatabaseHooks
from workers.runs.resume import MissingCheckpoint, fetch_checkpoint, init_copy

__all__ = ["init_copy", "prepare_init"]


def prepare_init(
    spec: ExperimentSpec,
    session_factory: sessionmaker[Session],
    storage: ArtifactStore,
    hooks: DatabaseHooks,
    copy: Path,
) -> Path | None:
    """The local copy of the checkpoint ``spec.init`` names, or None without ``init``;
    ``MissingCheckpoint`` when its record or its object is gone or corrupt (the run fails with
    that reason, and nothing of the parent's is touched)."""
    init = spec.init
    if init is None:
        return None
    at = f"the checkpoint {init.checkpoint_id} of experiment {init.experiment_id} (init)"
    row = retry_transient(
        lambda: _record(init.experiment_id, init.checkpoint_id, session_factory),
        "finding the checkpoint to warm-start from",
    )
    if row is None:
        raise MissingCheckpoint(f"{at} has no record any more, so the run cannot start from it")
    fetch_checkpoint(storage, row, copy, at)
    hooks.log(
        "info",
        f"fetched {at} at step {row.step:,} from {storage.locate(row.path)} "
        f"({row.size_bytes:,} bytes, sha256 verified)",
    )
    return copy


def _record(
    experiment_id: str, checkpoint_id: str, session_factory: sessionmaker[Session]
) -> Checkpoint | None:
    with session_factory() as session:
        return CheckpointRepository(session).get(experiment_id, checkpoint_id)
