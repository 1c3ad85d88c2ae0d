"""Events of one experiment commit in the order of their ids (PostgreSQL).

A stream reader resumes "after event id N" (SSE ``Last-Event-ID``). That is only gap-free if no
event of the experiment with an id below N can still commit after the reader has seen N. With a
plain sequence it can: the worker's transaction takes id 10, the API's cancel takes id 11 and
commits first, a reader sees 11 and later resumes after it, never seeing 10.

This trigger makes every insert into ``experiment_events`` first lock its experiment's row
(``FOR NO KEY UPDATE``: it does not conflict with the key-share locks that foreign keys take, so it
adds no deadlock with the other tables' writes) and only then draw its id from the sequence. Two
transactions writing events of one experiment are thus serialised from the id draw to the commit,
whoever writes them (API, worker, CLI). The id the column default drew before the trigger ran is
discarded; a sequence may have holes, readers never rely on ids being dense.

SQLite needs nothing: it has one writer at a time, from its first write to its commit.

Revision ID: 0002
Revises: 0001
Create Date: 2025-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FUNCTION = "marlforge_order_experiment_event"
TRIGGER = "experiment_events_commit_order"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"""
        CREATE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM 1 FROM experiments WHERE id = NEW.experiment_id FOR NO KEY UPDATE;
            NEW.id := nextval(pg_get_serial_sequence('experiment_events', 'id'));
            RETURN NEW;
        END
        $$
    """)
    op.execute(f"""
        CREATE TRIGGER {TRIGGER} BEFORE INSERT ON experiment_events
        FOR EACH ROW EXECUTE FUNCTION {FUNCTION}()
    """)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"DROP TRIGGER IF EXISTS {TRIGGER} ON experiment_events")
    op.execute(f"DROP FUNCTION IF EXISTS {FUNCTION}()")
