"""Checkpoint records (the files themselves live in ``core.storage``)."""

from __future__ import annotations

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from core.db import utcnow
from core.ids import new_id
from core.models import Checkpoint, Experiment


class CheckpointRepository:
    """SQL over ``checkpoints``."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def record(
        self,
        experiment_id: str,
        step: int,
        path: str,
        size_bytes: int,
        sha256: str,
        eval_return: float | None = None,
    ) -> Checkpoint:
        """Record the checkpoint at ``step`` (with the evaluation return taken at that step, if
        any); a second one at the same step replaces the first (the file was replaced by the same
        atomic rename)."""
        existing = self.session.scalar(
            select(Checkpoint).where(
                Checkpoint.experiment_id == experiment_id, Checkpoint.step == step
            )
        )
        if existing is not None:
            existing.path, existing.size_bytes, existing.sha256 = path, size_bytes, sha256
            existing.eval_return = eval_return
            existing.created_at = utcnow()
            self.session.flush()
            return existing
        row = Checkpoint(
            id=new_id(),
            experiment_id=experiment_id,
            step=step,
            path=path,
            size_bytes=size_bytes,
            sha256=sha256,
            created_at=utcnow(),
            eval_return=eval_return,
        )
        self.session.add(row)
        self.session.flush()
        return row

    def all_of(self, experiment_id: str) -> list[Checkpoint]:
        """The experiment's checkpoints, oldest step first."""
        query = (
            select(Checkpoint)
            .where(Checkpoint.experiment_id == experiment_id)
            .order_by(Checkpoint.step)
        )
        return list(self.session.scalars(query))

    def get(self, experiment_id: str, checkpoint_id: str) -> Checkpoint | None:
        """One checkpoint of the experiment, or None."""
        return self.session.scalar(
            select(Checkpoint).where(
                Checkpoint.experiment_id == experiment_id, Checkpoint.id == checkpoint_id
            )
        )

    def all_hashes(self) -> list[tuple[str, str]]:
        """The key and sha256 of every recorded checkpoint of every experiment."""
        return [(p, h) for p, h in self.session.execute(select(Checkpoint.path, Checkpoint.sha256))]

    def latest(self, experiment_id: str) -> Checkpoint | None:
        """The checkpoint with the highest step, or None."""
        query = (
            select(Checkpoint)
            .where(Checkpoint.experiment_id == experiment_id)
            .order_by(Checkpoint.step.desc())
            .limit(1)
        )
        return self.session.scalar(query)

    def best(self, experiment_id: str) -> Checkpoint | None:
        """The checkpoint with the highest evaluation return (the earliest of equal ones), or
        None when none has one."""
        query = (
            select(Checkpoint)
            .where(Checkpoint.experiment_id == experiment_id, Checkpoint.eval_return.is_not(None))
            .order_by(Checkpoint.eval_return.desc(), Checkpoint.step)
            .limit(1)
        )
        return self.session.scalar(query)

    def beyond(
        self, experiment_id: str, keep_last: int, keep_best: bool = False
    ) -> list[Checkpoint]:
        """The checkpoints older than the newest ``keep_last``, less the best when ``keep_best``
        and less those a warm start names (``experiments.init_checkpoint_id``)."""
        named = select(Experiment.init_checkpoint_id).where(
            Experiment.init_experiment_id == experiment_id
        )
        query = (
            select(Checkpoint)
            .where(Checkpoint.experiment_id == experiment_id)
            .order_by(Checkpoint.step.desc())
            .offset(keep_last)
        )
        kept = set(self.session.scalars(named))
        best = self.best(experiment_id) if keep_best else None
        return [
            r
            for r in self.session.scalars(query)
            if (best is None or r.id != best.id) and r.id not in kept
        ]

    def after(self, experiment_id: str, step: int) -> list[Checkpoint]:
        """The checkpoints taken after ``step``."""
        query = select(Checkpoint).where(
            Checkpoint.experiment_id == experiment_id, Checkpoint.step > step
        )
        return list(self.session.scalars(query))

    def run_bytes(self, experiment_id: str) -> int:
        """The bytes of the experiment's recorded checkpoints."""
        query = select(func.coalesce(func.sum(Checkpoint.size_bytes), 0)).where(
            Checkpoint.experiment_id == experiment_id
        )
        return int(self.session.scalar(query) or 0)

    def project_bytes(self, project_id: str) -> int:
        """The bytes of the recorded checkpoints of every run of the project."""
        query = (
            select(func.coalesce(func.sum(Checkpoint.size_bytes), 0))
            .join(Experiment, Experiment.id == Checkpoint.experiment_id)
            .where(Experiment.project_id == project_id)
        )
        return int(self.session.scalar(query) or 0)

    def delete(self, rows: list[Checkpoint]) -> None:
        """Remove these records."""
        if rows:
            self.session.execute(delete(Checkpoint).where(Checkpoint.id.in_([r.id for r in rows])))
