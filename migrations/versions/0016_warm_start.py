"""Warm starts: the run and the checkpoint a run starts from.

``experiments.init_experiment_id`` and ``experiments.init_checkpoint_id`` copy a warm-started
run's ``spec.init`` (the checkpoint resolved at submission, ``core.experiments.warm_start``),
indexed: the parent's pruning keeps a checkpoint a warm start names, and a run's record links to its
parent. NULL for every run before this revision (none could warm-start).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("init_experiment_id", sa.String(26), nullable=True))
        batch.add_column(sa.Column("init_checkpoint_id", sa.String(26), nullable=True))
        batch.create_index("ix_experiments_init_experiment_id", ["init_experiment_id"])
        batch.create_index("ix_experiments_init_checkpoint_id", ["init_checkpoint_id"])


def downgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.drop_index("ix_experiments_init_checkpoint_id")
        batch.drop_index("ix_experiments_init_experiment_id")
        batch.drop_column("init_checkpoint_id")
        batch.drop_column("init_experiment_id")
