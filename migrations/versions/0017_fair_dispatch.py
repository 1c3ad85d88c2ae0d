"""Fair dispatch: the queue a run was sent to, and when the service put a started run back.

``experiments.queue`` is the queue name a run's message was last sent on
(``core.dispatch.queue.queue_for`` with the deployment's prefix), so a worker taking a message picks
among the runs of that queue only (``core.dispatch.fair_share``). ``experiments.interrupted_at`` is
when the service itself put a started run back in its queue (a lost worker's takeover, a stopping
worker, a local worker's restart): such a run goes ahead of new work; a worker's claim clears it.
Both NULL for every row before this revision: such a queued run is started by its own message, as
before.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("queue", sa.String(200), nullable=True))
        batch.add_column(sa.Column("interrupted_at", sa.DateTime(timezone=True), nullable=True))
        batch.create_index("ix_experiments_queue_status", ["queue", "status"])


def downgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.drop_index("ix_experiments_queue_status")
        batch.drop_column("interrupted_at")
        batch.drop_column("queue")
