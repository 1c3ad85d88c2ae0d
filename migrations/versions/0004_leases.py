"""Leases: which worker holds a running experiment, its last heartbeat, when its hold expires, and
how many times the run was restarted after losing its worker.

Runs that are running while this migration applies get no lease (NULL): the first reaper pass
after the upgrade treats them as held by a worker that is gone only once their ``updated_at`` is
older than a lease (see ``core.leases.service``).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("worker_id", sa.String(200), nullable=True))
        batch.add_column(sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(
            sa.Column("restarts", sa.Integer(), nullable=False, server_default=sa.text("0"))
        )
    op.create_index("ix_experiments_lease_expires_at", "experiments", ["lease_expires_at"])


def downgrade() -> None:
    op.drop_index("ix_experiments_lease_expires_at", table_name="experiments")
    with op.batch_alter_table("experiments") as batch:
        batch.drop_column("restarts")
        batch.drop_column("lease_expires_at")
        batch.drop_column("heartbeat_at")
        batch.drop_column("worker_id")
