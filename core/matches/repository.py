"""Matches: insert, read within a project, list with a cursor, and move a match from one status
to the next only from the status expected (so two workers never play the same match)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import func, or_, select, update
from sqlalchemy.orm import Session

from core.db import utcnow
from core.enums import MatchStatus
from core.models import Match


class MatchRepository:
    """SQL over ``matches``."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, match: Match) -> None:
        """Stage a new match for insertion."""
        self.session.add(match)
        self.session.flush()

    def get(self, match_id: str, project_id: str | None = None) -> Match | None:
        """The match; None when there is none (or it belongs to another project than
        ``project_id``, when given)."""
        match = self.session.get(Match, match_id)
        if match is None or (project_id is not None and match.project_id != project_id):
            return None
        return match

    def page(
        self, project_id: str, limit: int, after: str | None, status: MatchStatus | None = None
    ) -> list[Match]:
        """Up to ``limit`` matches of the project, newest first, older than ``after``."""
        query = (
            select(Match)
            .where(Match.project_id == project_id)
            .order_by(Match.id.desc())
            .limit(limit)
        )
        if after is not None:
            query = query.where(Match.id < after)
        if status is not None:
            query = query.where(Match.status == status)
        return list(self.session.scalars(query))

    def count_active(self, project_id: str) -> int:
        """The project's matches that are queued or playing."""
        query = select(func.count()).where(
            Match.project_id == project_id,
            Match.status.in_([MatchStatus.QUEUED, MatchStatus.RUNNING]),
        )
        return int(self.session.scalar(query) or 0)

    def created_since(self, project_id: str, since: dt.datetime) -> list[dt.datetime]:
        """When each of the project's matches created after ``since`` was."""
        query = select(Match.created_at).where(
            Match.project_id == project_id, Match.created_at > since
        )
        return list(self.session.scalars(query))

    def queued_before(self, cutoff: dt.datetime, limit: int) -> list[Match]:
        """Queued matches that were queued, and last sent again (``dispatched_at``), before
        ``cutoff``; oldest first."""
        query = (
            select(Match)
            .where(
                Match.status == MatchStatus.QUEUED,
                Match.updated_at < cutoff,
                or_(Match.dispatched_at.is_(None), Match.dispatched_at < cutoff),
            )
            .order_by(Match.updated_at, Match.id)
            .limit(limit)
        )
        return list(self.session.scalars(query))

    def mark_dispatched(self, match: Match, now: dt.datetime, reason: str) -> bool:
        """Set ``dispatched_at`` (and the reason a person reads) only if the match is still
        queued as it was read: of several processes, one wins."""
        seen = (
            Match.dispatched_at.is_(None)
            if match.dispatched_at is None
            else Match.dispatched_at == match.dispatched_at
        )
        statement = (
            update(Match)
            .where(
                Match.id == match.id,
                Match.status == MatchStatus.QUEUED,
                Match.updated_at == match.updated_at,
                seen,
            )
            .values(dispatched_at=now, status_reason=reason)
            .execution_options(synchronize_session=False)
        )
        return bool(self.session.execute(statement).rowcount)  # type: ignore[attr-defined]

    def status_of(self, match_id: str) -> MatchStatus | None:
        """The match's status as committed now (None when there is no such match)."""
        return self.session.scalar(select(Match.status).where(Match.id == match_id))

    def move(
        self,
        match_id: str,
        expected: MatchStatus,
        to: MatchStatus,
        *,
        reason: str | None = None,
        **values: Any,
    ) -> bool:
        """Move the match from ``expected`` to ``to`` (with ``values``); False when it was not in
        ``expected`` (another worker has it, or it ended)."""
        now = utcnow()
        stamps: dict[str, Any] = {"updated_at": now}
        if to == MatchStatus.RUNNING:
            stamps["started_at"] = now
        if to in (MatchStatus.SUCCEEDED, MatchStatus.FAILED, MatchStatus.CANCELLED):
            stamps["finished_at"] = now
        statement = (
            update(Match)
            .where(Match.id == match_id, Match.status == expected)
            .values(status=to, status_reason=reason, **stamps, **values)
            .execution_options(synchronize_session=False)
        )
        moved = self.session.execute(statement).rowcount  # type: ignore[attr-defined]
        return bool(moved)
