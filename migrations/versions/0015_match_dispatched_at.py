"""When a queued match's message was last sent again by the reconciler.

``matches.dispatched_at`` is to a match what ``experiments.dispatched_at`` (revision 0013) is to
a run: written by ``core.dispatch.reconcile`` when it sends a queued match's message again (the
broker held none), conditionally, so that of several API processes only one sends it. NULL until
then.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("matches") as batch:
        batch.add_column(sa.Column("dispatched_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("matches") as batch:
        batch.drop_column("dispatched_at")
