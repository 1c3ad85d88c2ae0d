"""Sweeps: a base spec trained over a search space's configurations × seeds (``core.sweeps``).

``sweeps`` holds the study; its runs are ordinary experiments that name it (``sweep_id``) and their
configuration (``sweep_config``). Runs submitted before sweeps existed belong to none.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSONType = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "sweeps",
        sa.Column("id", sa.String(26), primary_key=True),
        sa.Column(
            "project_id",
            sa.String(26),
            sa.ForeignKey("projects.id", ondelete="RESTRICT"),
            nullable=False,
        ),
        sa.Column("created_by_key_id", sa.String(26), nullable=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("spec", JSONType, nullable=False),
        sa.Column("configurations", JSONType, nullable=False),
        sa.Column("seeds", JSONType, nullable=False),
        sa.Column("max_concurrent", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_sweeps_project_id_id", "sweeps", ["project_id", "id"])
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("sweep_id", sa.String(26), nullable=True))
        batch.add_column(sa.Column("sweep_config", sa.String(16), nullable=True))
        batch.create_foreign_key(
            "fk_experiments_sweep_id", "sweeps", ["sweep_id"], ["id"], ondelete="RESTRICT"
        )
    op.create_index("ix_experiments_sweep_id", "experiments", ["sweep_id"])


def downgrade() -> None:
    op.drop_index("ix_experiments_sweep_id", table_name="experiments")
    with op.batch_alter_table("experiments") as batch:
        batch.drop_constraint("fk_experiments_sweep_id", type_="foreignkey")
        batch.drop_column("sweep_config")
        batch.drop_column("sweep_id")
    op.drop_index("ix_sweeps_project_id_id", table_name="sweeps")
    op.drop_table("sweeps")
