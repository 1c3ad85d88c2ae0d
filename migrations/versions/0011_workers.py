"""The registry of workers, and the device a run computes on.

``workers`` holds one row per live worker and backend it consumes (``core.fleet.registry``): its
queues, its resource class (``cpu``, or ``gpu`` when it consumes the backend's ``-gpu`` queue), the
GPUs its framework sees, when it started and when it was last seen. A worker writes its rows when it
is ready and refreshes them on its heartbeat; the API reads them to tell a run that needs a GPU
whether any GPU worker of its backend is there. Workers from before this revision are not in it
until they are restarted.

``experiments.device`` is the device the run's worker resolved for it when it last started the
run (``cpu``, ``cuda:0 (NVIDIA H100 80GB HBM3)``); runs from before stay NULL.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSONType = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "workers",
        sa.Column("id", sa.String(200), primary_key=True),
        sa.Column("backend", sa.String(32), primary_key=True),
        sa.Column("hostname", sa.String(255), nullable=False),
        sa.Column("queues", JSONType, nullable=False),
        sa.Column("resource_class", sa.String(32), nullable=False),
        sa.Column("gpus", JSONType, nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index(
        "ix_workers_backend_class_seen",
        "workers",
        ["backend", "resource_class", "last_seen_at"],
    )
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("device", sa.String(200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.drop_column("device")
    op.drop_index("ix_workers_backend_class_seen", table_name="workers")
    op.drop_table("workers")
