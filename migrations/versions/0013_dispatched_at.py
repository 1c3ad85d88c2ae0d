"""When a queued run's message was last sent again by the reconciler.

``experiments.dispatched_at`` is written by ``core.dispatch.reconcile`` when it sends a queued run's
message again (the broker held none for it): a conditional write, so of several API processes
only one sends it, and the next pass waits ``dispatch_grace_s`` before it looks at the run again.
NULL for every run until then; a run queued again later counts from its ``updated_at``.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("dispatched_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.drop_column("dispatched_at")
