"""A checkpoint's evaluation return: the run's ``eval/episode_return`` at the checkpoint's step,
NULL when no evaluation was taken at that step. The checkpoint with the highest one is the run's
best (``checkpoint.keep_best``: kept beside the newest ``keep_last``); it is found by this
column, so no separate marker is stored.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("checkpoints") as batch:
        batch.add_column(sa.Column("eval_return", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("checkpoints") as batch:
        batch.drop_column("eval_return")
