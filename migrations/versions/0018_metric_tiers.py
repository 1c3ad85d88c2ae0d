"""Metric tiers: summaries of each series over aligned step ranges, for charts of long runs.

``metric_tiers`` holds, per (experiment, name, tier, bucket), the summary of the series' points in
steps ``bucket * 4 ** tier`` to ``(bucket + 1) * 4 ** tier - 1`` (``core.metrics.tiers``); the
service writes it with every change to ``metric_points``. The upgrade summarises the points
already stored, run by run (``core.metrics.tier_repository.TierRepository.rebuild``; about half a
million points a pass).

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.orm import Session

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "metric_tiers",
        sa.Column(
            "experiment_id",
            sa.String(26),
            sa.ForeignKey("experiments.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("tier", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("bucket", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("points", sa.BigInteger(), nullable=False),
        sa.Column("first_step", sa.BigInteger(), nullable=False),
        sa.Column("first_wall", sa.Double(), nullable=False),
        sa.Column("last_step", sa.BigInteger(), nullable=False),
        sa.Column("low_value", sa.Double(), nullable=True),
        sa.Column("low_step", sa.BigInteger(), nullable=True),
        sa.Column("low_wall", sa.Double(), nullable=True),
        sa.Column("high_value", sa.Double(), nullable=True),
        sa.Column("high_step", sa.BigInteger(), nullable=True),
        sa.Column("high_wall", sa.Double(), nullable=True),
    )
    # The summaries are the service's own rule, so the upgrade writes them with its code.
    from core.metrics.series import SeriesRepository
    from core.metrics.tier_repository import TierRepository

    session = Session(bind=op.get_bind())
    runs = session.scalars(sa.text("SELECT DISTINCT experiment_id FROM metric_points")).all()
    for experiment_id in runs:
        names = SeriesRepository(session).names(experiment_id)
        TierRepository(session).rebuild(experiment_id, names)
    session.flush()


def downgrade() -> None:
    op.drop_table("metric_tiers")
