"""Model-based searches: whether a sweep has configurations left to propose.

``sweeps.proposing`` is true for a sweep whose ``search`` (``core.sweeps.tpe``) proposes its
configurations one by one while it runs, until it has proposed ``search.trials`` of them or is
cancelled; the sweep scheduler then looks at it even while none of its runs is pending. False for
every sweep before this revision (their configurations were all stored at submission).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("sweeps") as batch:
        batch.add_column(
            sa.Column("proposing", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("sweeps") as batch:
        batch.drop_column("proposing")
