"""The first schema: experiments, metric points, checkpoints, status transitions and events.

Revision ID: 0001
Revises:
Create Date: 2025-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSONType = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _ts(name: str, nullable: bool = False) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _experiment_fk() -> sa.Column[object]:
    return sa.Column(
        "experiment_id",
        sa.String(26),
        sa.ForeignKey("experiments.id", ondelete="CASCADE"),
        nullable=False,
    )


def upgrade() -> None:
    op.create_table(
        "experiments",
        sa.Column("id", sa.String(26), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("algorithm", sa.String(32), nullable=False),
        sa.Column("backend", sa.String(32), nullable=False),
        sa.Column("spec", JSONType, nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("status_reason", sa.Text(), nullable=True),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("total_steps", sa.BigInteger(), nullable=False),
        sa.Column("latest_metrics", JSONType, nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        _ts("created_at"),
        _ts("updated_at"),
        _ts("started_at", nullable=True),
        _ts("finished_at", nullable=True),
    )
    op.create_index("ix_experiments_status", "experiments", ["status"])
    op.create_index("ix_experiments_algorithm", "experiments", ["algorithm"])
    op.create_index("ix_experiments_backend", "experiments", ["backend"])

    op.create_table(
        "metric_points",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        _experiment_fk(),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("value", sa.Double(), nullable=True),
        sa.Column("wall_time", sa.Double(), nullable=False),
        sa.UniqueConstraint("experiment_id", "name", "step", name="uq_metric_points_key"),
    )
    op.create_index("ix_metric_points_experiment_step", "metric_points", ["experiment_id", "step"])

    op.create_table(
        "checkpoints",
        sa.Column("id", sa.String(26), primary_key=True),
        _experiment_fk(),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("path", sa.String(500), nullable=False),
        _ts("created_at"),
        sa.UniqueConstraint("experiment_id", "step", name="uq_checkpoints_step"),
    )
    op.create_index("ix_checkpoints_experiment_id", "checkpoints", ["experiment_id"])

    op.create_table(
        "status_transitions",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        _experiment_fk(),
        sa.Column("from_status", sa.String(32), nullable=True),
        sa.Column("to_status", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        _ts("created_at"),
    )
    op.create_index(
        "ix_status_transitions_experiment", "status_transitions", ["experiment_id", "id"]
    )

    op.create_table(
        "experiment_events",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        _experiment_fk(),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("payload", JSONType, nullable=False),
        _ts("created_at"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_experiment_events_experiment", "experiment_events", ["experiment_id", "id"])


def downgrade() -> None:
    op.drop_table("experiment_events")
    op.drop_table("status_transitions")
    op.drop_table("checkpoints")
    op.drop_table("metric_points")
    op.drop_table("experiments")
