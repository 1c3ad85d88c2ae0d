"""Projects, API keys and auth sessions: the SQL behind ``core.auth``."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from core.models import ApiKey, AuthSession, Project


class ProjectRepository:
    """SQL over ``projects``."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def by_name(self, name: str) -> Project | None:
        """The project called ``name``, or None."""
        return self.session.scalar(select(Project).where(Project.name == name))

    def get(self, project_id: str) -> Project | None:
        """The project with this id, or None."""
        return self.session.get(Project, project_id)

    def names(self) -> dict[str, str]:
        """Every project's name by its id."""
        return {p.id: p.name for p in self.session.scalars(select(Project))}

    def lock(self, project_id: str) -> None:
        """Hold the project's row until the transaction ends (PostgreSQL; SQLite has one writer
        anyway), so two submissions of one project count its quotas one after the other."""
        self.session.execute(select(Project.id).where(Project.id == project_id).with_for_update())

    def add(self, project: Project) -> None:
        """Stage a new project."""
        self.session.add(project)
        self.session.flush()


class KeyRepository:
    """SQL over ``api_keys``."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, key: ApiKey) -> None:
        """Stage a new key."""
        self.session.add(key)
        self.session.flush()

    def by_hash(self, token_hash: str) -> ApiKey | None:
        """The key whose token hashes to ``token_hash`` (revoked or not), or None."""
        return self.session.scalar(select(ApiKey).where(ApiKey.token_hash == token_hash))

    def get(self, key_id: str) -> ApiKey | None:
        """The key with this id, or None."""
        return self.session.get(ApiKey, key_id, populate_existing=True)

    def of_project(self, project_id: str | None) -> list[ApiKey]:
        """The project's keys (every project's when None), oldest first."""
        query = select(ApiKey).order_by(ApiKey.id)
        if project_id is not None:
            query = query.where(ApiKey.project_id == project_id)
        return list(self.session.scalars(query))

    def touch(self, key_id: str, now: dt.datetime) -> None:
        """Record that the key was used at ``now``."""
        self.session.execute(
            update(ApiKey)
            .where(ApiKey.id == key_id)
            .values(last_used_at=now)
            .execution_options(synchronize_session=False)
        )

    def revoke(self, key_id: str, now: dt.datetime) -> None:
        """Mark the key revoked (kept for the audit trail) and end its sessions."""
        self.session.execute(
            update(ApiKey)
            .where(ApiKey.id == key_id, ApiKey.revoked_at.is_(None))
            .values(revoked_at=now)
            .execution_options(synchronize_session=False)
        )
        self.session.execute(delete(AuthSession).where(AuthSession.key_id == key_id))


class AuthSessionRepository:
    """SQL over ``auth_sessions``."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, row: AuthSession) -> None:
        """Stage a new session or login token."""
        self.session.add(row)
        self.session.flush()

    def by_hash(self, kind: str, token_hash: str) -> AuthSession | None:
        """The row of this kind whose token hashes to ``token_hash``, or None."""
        query = select(AuthSession).where(
            AuthSession.kind == kind, AuthSession.token_hash == token_hash
        )
        return self.session.scalar(query)

    def remove(self, row_id: str) -> bool:
        """Delete one row; True when it existed (so a one-time token is used once)."""
        result = self.session.execute(delete(AuthSession).where(AuthSession.id == row_id))
        return result.rowcount == 1  # type: ignore[attr-defined,no-any-return]

    def remove_expired(self, now: dt.datetime) -> None:
        """Forget sessions and login tokens past their expiry."""
        self.session.execute(delete(AuthSession).where(AuthSession.expires_at < now))
