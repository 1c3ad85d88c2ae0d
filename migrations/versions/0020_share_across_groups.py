"""Networks per group: stored specs say how their runs shared networks across a team's groups.

Until this revision the agents of a team shared one set of networks whatever their group
(simple_speaker_listener's speaker and listener: one actor and one critic, inputs padded). From
now on each group of a team has its own unless the spec says ``share_across_groups: true``. A
stored spec without the field (every spec of IPPO, MAPPO, MADDPG and WQMIX before this revision,
each experiment's and each sweep's base) gets ``true``, so that the spec still describes the
networks its checkpoints hold: a resume, a takeover, a continued run and a warm start of such a
run build what it trained. Checkpoint files are read the same way
(``learners.checkpoint.LEGACY_HYPERPARAMETERS``). Specs that already name the field are left as
they are. The downgrade leaves the field in place: older code reads ``true`` as it always did.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ALGORITHMS = ("ippo", "mappo", "maddpg", "wqmix")
_FIELD = "share_across_groups"
_BATCH = 500


def _filled(spec: Any) -> dict[str, Any] | None:
    """``spec`` with the field filled in, or None when it needs nothing."""
    if not isinstance(spec, dict) or spec.get("algorithm") not in _ALGORITHMS:
        return None
    hyperparameters = spec.get("hyperparameters")
    if hyperparameters is None:
        hyperparameters = {}
    if not isinstance(hyperparameters, dict) or _FIELD in hyperparameters:
        return None
    return {**spec, "hyperparameters": {**hyperparameters, _FIELD: True}}


def _update(table: str, base: bool) -> None:
    bind = op.get_bind()
    json_type = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
    rows = sa.table(table, sa.column("id", sa.String), sa.column("spec", json_type))
    last = ""
    while True:
        batch = bind.execute(
            sa.select(rows.c.id, rows.c.spec)
            .where(rows.c.id > last)
            .order_by(rows.c.id)
            .limit(_BATCH)
        ).all()
        if not batch:
            return
        for row_id, spec in batch:
            if base:
                filled = _filled(spec.get("base")) if isinstance(spec, dict) else None
                new = None if filled is None else {**spec, "base": filled}
            else:
                new = _filled(spec)
            if new is not None:
                bind.execute(sa.update(rows).where(rows.c.id == row_id).values(spec=new))
        last = batch[-1][0]


def upgrade() -> None:
    _update("experiments", base=False)
    _update("sweeps", base=True)


def downgrade() -> None:
    pass
