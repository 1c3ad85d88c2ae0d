"""Names are one line of printable text: repair the rows stored before that was checked.

A run's, a sweep's, a match's and a key's name are now refused at the door when they hold a
control character (a terminal's escapes, line breaks, tabs), a Unicode line separator or a
bidirectional control (``learners.spec.Label``). Rows stored before then keep their name with each
such character replaced by U+FFFD (the replacement character), in the name column and, for runs
and sweeps, in the stored spec, so that no stored row can forge what a terminal or a table shows
and every stored spec still validates.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A copy, as of this revision, of what ``learners.spec.Label`` refuses.
_CONTROL = [
    *range(0x20),
    *range(0x7F, 0xA0),
    0x061C,
    0x200E,
    0x200F,
    0x2028,
    0x2029,
    *range(0x202A, 0x202F),
    *range(0x2066, 0x206A),
]
_REPAIR = dict.fromkeys(_CONTROL, "\ufffd")

# (table, whether its spec column holds the name too)
_TABLES = (("api_keys", False), ("sweeps", True), ("experiments", True), ("matches", False))


def _spec(value: Any) -> dict[str, Any] | None:
    if isinstance(value, str):
        value = json.loads(value)
    return value if isinstance(value, dict) else None


def upgrade() -> None:
    connection = op.get_bind()
    for table, with_spec in _TABLES:
        rows = connection.execute(sa.text(f"SELECT id, name FROM {table}")).all()
        bad = [(i, name) for i, name in rows if name != name.translate(_REPAIR)]
        for row_id, name in bad:
            values: dict[str, Any] = {"id": row_id, "name": name.translate(_REPAIR)}
            assignments = "name = :name"
            if with_spec:
                stored = connection.execute(
                    sa.text(f"SELECT spec FROM {table} WHERE id = :id"), {"id": row_id}
                ).scalar_one()
                spec = _spec(stored)
                if spec is not None:
                    for holder in (spec, spec.get("base")):  # a sweep's base spec names its runs
                        if isinstance(holder, dict) and isinstance(holder.get("name"), str):
                            holder["name"] = holder["name"].translate(_REPAIR)
                    values["spec"] = json.dumps(spec)
                    postgres = connection.dialect.name == "postgresql"
                    assignments += ", spec = CAST(:spec AS JSONB)" if postgres else ", spec = :spec"
            connection.execute(sa.text(f"UPDATE {table} SET {assignments} WHERE id = :id"), values)


def downgrade() -> None:
    """Nothing to undo: the characters replaced are not kept."""
