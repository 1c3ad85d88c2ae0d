"""Projects and keys for tests that drive the service directly (not through its HTTP API)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from core import auth
from core.auth.tokens import server_secret
from core.enums import Role
from core.models import Experiment, Project
from core.settings import Settings

DEFAULT_PROJECT = "default"


def default_project_id(session: Session) -> str:
    """The id of project ``default`` (the migrations create it)."""
    return auth.ensure_project(session, DEFAULT_PROJECT).id


def new_key(
    sessions: sessionmaker[Session],
    settings: Settings,
    role: Role = Role.MEMBER,
    project: str = DEFAULT_PROJECT,
) -> str:
    """A new key of ``project`` (created when new), committed; returns the token."""
    with sessions() as session:
        created = auth.create_key(
            session, server_secret(settings), auth.ensure_project(session, project), role, "test"
        )
        session.commit()
    return created.token


def experiment_count(session: Session, project: str) -> int:
    """How many experiments ``project`` has (the session database holds other tests' runs too)."""
    query = (
        select(func.count())
        .select_from(Experiment)
        .join(Project, Project.id == Experiment.project_id)
        .where(Project.name == project)
    )
    return int(session.scalar(query) or 0)


def bearer(token: str) -> dict[str, str]:
    """The header that presents ``token``."""
    return {"authorization": f"Bearer {token}"}
