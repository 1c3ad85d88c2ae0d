"""A run's checkpoints as the worker writes them: the file stored (an upload the store refuses
is tried again for ``upload_retry_s``), then its record with the oldest pruned (never the best,
with ``keep_best``), within the run's and its project's byte limits
(``MARLFORGE_RUN_MAX_CHECKPOINT_MB``, ``MARLFORGE_PROJECT_MAX_ARTIFACT_MB``): a checkpoint past
either is not recorded, its file is deleted, and the run fails with ``ArtifactQuotaExceeded``,
its earlier checkpoints kept. Files go only after their records: a crash in between leaves an
orphan file, never a record pointing at nothing."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from core.enums import EventKind
from core.experiments.checkpoints import CheckpointRepository
from core.experiments.events import EventRepository
from core.experiments.repository import ExperimentRepository
from core.models import Checkpoint
from core.storage import ArtifactStore, StoredObject, StoreError, UploadFailed, checkpoint_key

log = logging.getLogger(__name__)

MIB = 2**20

Refusal = tuple[str, bool]
"""Why a checkpoint is past a limit, and whether its key was recorded before (its file then is
an earlier checkpoint's, which stays)."""


class ArtifactWriteError(OSError):
    """A checkpoint could not be written to the artifact storage."""


class ArtifactQuotaExceeded(RuntimeError):
    """A checkpoint would take the run's or its project's kept checkpoints past their limit."""


class CheckpointWriter:
    """Stores, records and prunes one run's checkpoints."""

    def __init__(
        self,
        experiment_id: str,
        session_factory: sessionmaker[Session],
        storage: ArtifactStore,
        *,
        keep_last: int,
        keep_best: bool,
        upload_retry_s: float,
        max_run_bytes: int | None,
        max_project_bytes: int | None,
        report: Callable[[str, str], None],
    ) -> None:
        """``report(level, message)``: a line in the run's log, written at once (the upload's
        retries say what they wait for)."""
        self.experiment_id = experiment_id
        self.session_factory = session_factory
        self.storage = storage
        self.keep_last = keep_last
        self.keep_best = keep_best
        self.upload_retry_s = upload_retry_s
        self.max_run_bytes = max_run_bytes
        self.max_project_bytes = max_project_bytes
        self._report = report

    def store(self, step: int, write: Callable[[Path], None]) -> StoredObject:
        """The checkpoint's file in the store, or ``ArtifactWriteError`` saying where and why
        (nothing is then under its key, and the earlier checkpoints stay recorded)."""
        try:
            return self._upload(step, write)
        except UploadFailed as exc:
            # The store refused or stayed away through every retry.
            raise ArtifactWriteError(
                f"checkpoint upload to {exc.url} failed: {exc.reason}"
            ) from exc
        except OSError as exc:
            # Full or unwritable storage: the temporary file is gone.
            raise ArtifactWriteError(
                f"the checkpoint at step {step:,} could not be written to the artifact "
                f"storage ({self.storage.url}): {exc}"
            ) from exc

    def _upload(self, step: int, write: Callable[[Path], None]) -> StoredObject:
        """Store the checkpoint, trying again while the store refuses, for ``upload_retry_s``
        in all (pauses of 1, 2, 4... up to 30 s), each failure in the run's log."""
        key = checkpoint_key(self.experiment_id, step)
        give_up = time.monotonic() + self.upload_retry_s
        pause = 1.0
        while True:
            try:
                return self.storage.put(key, write)
            except UploadFailed as exc:
                left = give_up - time.monotonic()
                if left <= 0:
                    raise
                wait = min(pause, left)
                self._report(
                    "warning",
                    f"checkpoint upload to {exc.url} failed ({exc.reason}); trying again in "
                    f"{wait:.0f} s, for up to {self.upload_retry_s:.0f} s in all",
                )
                time.sleep(wait)
                pause = min(pause * 2, 30.0)

    def record(
        self, step: int, stored: StoredObject, eval_return: float | None
    ) -> tuple[list[Checkpoint], Refusal | None]:
        """Record the checkpoint file and prune the oldest (never the best, with ``keep_best``);
        the pruned rows. Past a storage limit nothing changes: no rows, and the refusal."""
        with self.session_factory() as session:
            checkpoints = CheckpointRepository(session)
            replaced = any(r.path == stored.key for r in checkpoints.all_of(self.experiment_id))
            row = checkpoints.record(
                self.experiment_id, step, stored.key, stored.size_bytes, stored.sha256, eval_return
            )
            pruned = checkpoints.beyond(self.experiment_id, self.keep_last, self.keep_best)
            checkpoints.delete(pruned)
            refused = self._over_limit(session, step, stored.size_bytes)
            if refused is not None:
                session.rollback()
                return [], (refused, replaced)
            best = checkpoints.best(self.experiment_id)
            EventRepository(session).add(
                self.experiment_id,
                EventKind.CHECKPOINT,
                {
                    "id": row.id,
                    "step": row.step,
                    "size_bytes": row.size_bytes,
                    "sha256": row.sha256,
                    "eval_return": row.eval_return,
                    "best_id": best.id if best is not None else None,
                    "pruned": [p.id for p in pruned],
                },
            )
            session.commit()
        return pruned, None

    def settle(
        self, stored: StoredObject, pruned: list[Checkpoint], refusal: Refusal | None
    ) -> None:
        """After ``record``: delete a refused checkpoint's file (then ``ArtifactQuotaExceeded``)
        or the pruned ones'."""
        if refusal is not None:
            refused, replaced = refusal
            if not replaced:
                try:
                    self.storage.delete(stored.key)
                except StoreError as exc:
                    log.warning(
                        "[%s] could not delete a refused checkpoint: %s", self.experiment_id, exc
                    )
            raise ArtifactQuotaExceeded(refused)
        for old in pruned:
            try:
                self.storage.delete(old.path)
            except StoreError as exc:
                # An orphan object costs space, not correctness: the run goes on.
                log.warning(
                    "[%s] could not delete a pruned checkpoint: %s", self.experiment_id, exc
                )

    def _over_limit(self, session: Session, step: int, size: int) -> str | None:
        """Why the checkpoint just recorded (and its pruning) in ``session`` is past the run's or
        the project's storage limit, or None."""
        at = f"the checkpoint at step {step:,} ({size / MIB:,.2f} MiB)"
        kept = "the run's earlier checkpoints are kept"
        checkpoints = CheckpointRepository(session)
        if self.max_run_bytes is not None:
            run = checkpoints.run_bytes(self.experiment_id)
            if run > self.max_run_bytes:
                return (
                    f"{at} would take the run's kept checkpoints to {run / MIB:,.2f} MiB, past "
                    f"its limit of {self.max_run_bytes / MIB:,.2f} MiB "
                    f"(MARLFORGE_RUN_MAX_CHECKPOINT_MB); {kept}"
                )
        if self.max_project_bytes is not None:
            experiment = ExperimentRepository(session).get(self.experiment_id)
            if experiment is not None:
                project = checkpoints.project_bytes(experiment.project_id)
                if project > self.max_project_bytes:
                    return (
                        f"{at} would take the project's checkpoints to {project / MIB:,.2f} "
                        f"MiB, past its limit of {self.max_project_bytes / MIB:,.2f} MiB "
                        f"(MARLFORGE_PROJECT_MAX_ARTIFACT_MB); {kept}"
                    )
        return None
