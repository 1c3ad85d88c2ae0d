"""Idempotency keys: read one, insert one (the unique (project, key) decides a race), purge old."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from core.models import IdempotencyKey


class IdempotencyRepository:
    """SQL over ``idempotency_keys``."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def get(self, project_id: str, key: str) -> IdempotencyKey | None:
        """The project's row for ``key``, freshly read, or None."""
        query = select(IdempotencyKey).where(
            IdempotencyKey.project_id == project_id, IdempotencyKey.key == key
        )
        return self.session.scalars(query.execution_options(populate_existing=True)).first()

    def add(self, row: IdempotencyKey) -> None:
        """Insert now (flush): raises IntegrityError when the project already holds the key; on
        PostgreSQL it first waits for a concurrent transaction that inserted it to end."""
        self.session.add(row)
        self.session.flush()

    def delete(self, project_id: str, key: str) -> None:
        """Forget one key."""
        self.session.execute(
            delete(IdempotencyKey).where(
                IdempotencyKey.project_id == project_id, IdempotencyKey.key == key
            )
        )

    def purge(self, before: dt.datetime) -> int:
        """Forget every key created before ``before``; how many."""
        result = self.session.execute(
            delete(IdempotencyKey).where(IdempotencyKey.created_at < before)
        )
        return int(result.rowcount)  # type: ignore[attr-defined]
