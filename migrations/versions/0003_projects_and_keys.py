"""Projects, API keys and dashboard sessions; every experiment belongs to a project.

Existing experiments move to a project named ``default`` (created here), so a database from before
keys existed keeps all its runs; ``marlforge keys create --project default`` then gives access.
Status transitions record the key whose request made them (``actor_key_id``).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from core.ids import new_id

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DEFAULT_PROJECT = "default"


def _ts(name: str, nullable: bool = False) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "projects",
        sa.Column("id", sa.String(26), primary_key=True),
        sa.Column("name", sa.String(64), nullable=False, unique=True),
        _ts("created_at"),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(26), primary_key=True),
        sa.Column(
            "project_id",
            sa.String(26),
            sa.ForeignKey("projects.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("role", sa.String(32), nullable=False),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        _ts("created_at"),
        sa.Column("created_by_key_id", sa.String(26), nullable=True),
        _ts("last_used_at", nullable=True),
        _ts("revoked_at", nullable=True),
    )
    op.create_index("ix_api_keys_project_id", "api_keys", ["project_id"])
    op.create_table(
        "auth_sessions",
        sa.Column("id", sa.String(26), primary_key=True),
        sa.Column(
            "key_id",
            sa.String(26),
            sa.ForeignKey("api_keys.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        _ts("created_at"),
        _ts("expires_at"),
    )
    op.create_index("ix_auth_sessions_key_id", "auth_sessions", ["key_id"])

    default_id = new_id()
    projects = sa.table(
        "projects",
        sa.column("id", sa.String),
        sa.column("name", sa.String),
        sa.column("created_at", sa.DateTime(timezone=True)),
    )
    op.bulk_insert(
        projects,
        [{"id": default_id, "name": DEFAULT_PROJECT, "created_at": dt.datetime.now(dt.UTC)}],
    )

    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("project_id", sa.String(26), nullable=True))
        batch.add_column(sa.Column("created_by_key_id", sa.String(26), nullable=True))
    op.execute(sa.text("UPDATE experiments SET project_id = :p").bindparams(p=default_id))
    with op.batch_alter_table("experiments") as batch:
        batch.alter_column("project_id", existing_type=sa.String(26), nullable=False)
        batch.create_foreign_key(
            "fk_experiments_project_id", "projects", ["project_id"], ["id"], ondelete="RESTRICT"
        )
        batch.create_index("ix_experiments_project_id", ["project_id"])
    with op.batch_alter_table("status_transitions") as batch:
        batch.add_column(sa.Column("actor_key_id", sa.String(26), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("status_transitions") as batch:
        batch.drop_column("actor_key_id")
    with op.batch_alter_table("experiments") as batch:
        batch.drop_index("ix_experiments_project_id")
        batch.drop_constraint("fk_experiments_project_id", type_="foreignkey")
        batch.drop_column("created_by_key_id")
        batch.drop_column("project_id")
    op.drop_index("ix_auth_sessions_key_id", "auth_sessions")
    op.drop_table("auth_sessions")
    op.drop_index("ix_api_keys_project_id", "api_keys")
    op.drop_table("api_keys")
    op.drop_table("projects")
