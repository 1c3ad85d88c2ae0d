"""The environment suites each worker serves.

``workers.suites`` lists the environment suites a worker can build and serves
(``MARLFORGE_WORKER_SUITES``, else every installed one); the API reads it to tell a queued run
whose suite no live worker of its backend serves what it waits for. Rows of workers from before
this revision stay NULL, which readers take as serving every suite, until the worker restarts.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSONType = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.add_column(sa.Column("suites", JSONType, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.drop_column("suites")
