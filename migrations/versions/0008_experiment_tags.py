"""Experiment tags: one row per (experiment, tag), so ``GET /v1/experiments?tag=`` is an index
lookup on every database (the spec keeps the list too; ``core.experiments.service`` writes both).

A side table rather than a JSON column: the same query and index on SQLite and PostgreSQL, with no
JSONB operators. Runs submitted before tags existed have none, so nothing is backfilled.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "experiment_tags",
        sa.Column(
            "experiment_id",
            sa.String(26),
            sa.ForeignKey("experiments.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("tag", sa.String(50), primary_key=True),
    )
    op.create_index("ix_experiment_tags_tag", "experiment_tags", ["tag", "experiment_id"])


def downgrade() -> None:
    op.drop_index("ix_experiment_tags_tag", table_name="experiment_tags")
    op.drop_table("experiment_tags")
