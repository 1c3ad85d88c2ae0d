"""Keys, projects and sessions: create, check, revoke. The API, the CLI and ``marlforge up`` call
these; the caller commits.

A request is made by a ``Principal``: one key of one project, with that key's role, reached either
with the key itself (``Authorization: Bearer mfk_...``) or with a dashboard session made from it.
Revoking a key ends its sessions, and every request re-reads the key, so revocation holds from the
next request on.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from dataclasses import dataclass
from typing import Literal

from sqlalchemy.orm import Session

from core.auth.repository import AuthSessionRepository, KeyRepository, ProjectRepository
from core.auth.tokens import new_token, token_hash
from core.db import utcnow
from core.enums import Role
from core.errors import NotFound, ServiceError
from core.ids import new_id
from core.models import ApiKey, AuthSession, Project
from learners.api import label_error

KEY_PREFIX = "mfk_"
SESSION_PREFIX = "mfs_"
LOGIN_PREFIX = "mfl_"
SESSION_TTL = dt.timedelta(days=7)
LOGIN_TTL = dt.timedelta(days=1)
# ``last_used_at`` is written at most this often per key: a busy client must not turn every read
# into a write.
TOUCH_EVERY = dt.timedelta(seconds=60)
PROJECT_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
MAX_TOKEN_LENGTH = 200

SESSION = "session"
LOGIN = "login"


class AuthError(ServiceError):
    """A credential that does not let anyone in (unknown, revoked, expired or malformed)."""

    code = "unauthenticated"


@dataclass(frozen=True)
class Principal:
    """Who makes a request: a key of a project, and how it was presented."""

    key_id: str
    key_name: str
    role: Role
    project_id: str
    project_name: str
    via: Literal["key", "session"]

    def describe(self) -> str:
        """How the timeline names this caller: ``key 'ci' (01J...)``."""
        return f"key {self.key_name!r} ({self.key_id})"


@dataclass(frozen=True)
class CreatedKey:
    """A new key: its row, and the token itself, which is never shown again."""

    key: ApiKey
    project: Project
    token: str


def check_project_name(name: str) -> str:
    """``name`` if it is a valid project name, else ServiceError saying why."""
    if not PROJECT_NAME.match(name):
        raise InvalidName(
            f"project name {name!r} must be 1-64 characters of a-z, 0-9, '-' and '_', "
            "starting with a letter or digit"
        )
    return name


class InvalidName(ServiceError):
    """A project or key name that is not allowed."""

    code = "invalid_name"


def ensure_project(session: Session, name: str) -> Project:
    """The project called ``name``, created when it does not exist yet."""
    projects = ProjectRepository(session)
    project = projects.by_name(check_project_name(name))
    if project is None:
        project = Project(id=new_id(), name=name, created_at=utcnow())
        projects.add(project)
    return project


def find_project(session: Session, name: str) -> Project | None:
    """The project called ``name``, or None."""
    return ProjectRepository(session).by_name(name)


def project_names(session: Session) -> dict[str, str]:
    """Every project's name by its id."""
    return ProjectRepository(session).names()


def key_of(session: Session, key_id: str) -> ApiKey | None:
    """The key with this id (revoked or not), or None."""
    return KeyRepository(session).get(key_id)


def create_key(
    session: Session,
    secret: bytes,
    project: Project,
    role: Role,
    name: str,
    created_by: str | None = None,
) -> CreatedKey:
    """A new key of ``project`` with ``role``; ``created_by`` is the id of the key that asked."""
    name = name.strip()
    if not 1 <= len(name) <= 100:
        raise InvalidName("a key's name must be 1-100 characters")
    if (reason := label_error(name)) is not None:
        raise InvalidName(f"a key's name {reason}")
    token = new_token(KEY_PREFIX)
    key = ApiKey(
        id=new_id(),
        project_id=project.id,
        name=name,
        role=role,
        prefix=token[: len(KEY_PREFIX) + 8],
        token_hash=token_hash(secret, token),
        created_at=utcnow(),
        created_by_key_id=created_by,
    )
    KeyRepository(session).add(key)
    return CreatedKey(key=key, project=project, token=token)


def list_keys(session: Session, project_id: str | None = None) -> list[ApiKey]:
    """The keys of one project (of all when None), revoked ones included, oldest first."""
    return KeyRepository(session).of_project(project_id)


def revoke_key(session: Session, key_id: str, project_id: str | None = None) -> ApiKey:
    """Revoke a key (of ``project_id`` when given: another project's key is not found)."""
    keys = KeyRepository(session)
    key = keys.get(key_id)
    if key is None or (project_id is not None and key.project_id != project_id):
        raise NotFound(f"no key with id {key_id!r}")
    keys.revoke(key_id, utcnow())
    revoked = keys.get(key_id)
    assert revoked is not None
    return revoked


def authenticate_key(session: Session, secret: bytes, token: str) -> Principal | None:
    """The principal of a key token, or None when it is unknown or revoked."""
    if not token.startswith(KEY_PREFIX) or len(token) > MAX_TOKEN_LENGTH:
        return None
    key = KeyRepository(session).by_hash(token_hash(secret, token))
    return _principal(session, key, "key")


def create_login_token(session: Session, secret: bytes, key: ApiKey) -> str:
    """A one-time token that signs the dashboard in as ``key`` (``marlforge up`` prints it)."""
    return _add_session(session, secret, key, LOGIN, LOGIN_TTL)


def start_session(session: Session, secret: bytes, credential: str) -> tuple[str, Principal]:
    """Exchange a key or a one-time login token for a new session token; AuthError if neither."""
    sessions = AuthSessionRepository(session)
    sessions.remove_expired(utcnow())
    principal: Principal | None = None
    if credential.startswith(LOGIN_PREFIX) and len(credential) <= MAX_TOKEN_LENGTH:
        row = sessions.by_hash(LOGIN, token_hash(secret, credential))
        # Removing the row is what makes the token one-time: of two concurrent uses, one wins.
        if row is not None and sessions.remove(row.id):
            principal = _principal(session, KeyRepository(session).get(row.key_id), "session")
    else:
        principal = authenticate_key(session, secret, credential)
    if principal is None:
        raise AuthError("the key or login token is unknown, revoked or expired")
    key = KeyRepository(session).get(principal.key_id)
    assert key is not None
    token = _add_session(session, secret, key, SESSION, SESSION_TTL)
    return token, dataclasses.replace(principal, via="session")


def authenticate_session(session: Session, secret: bytes, token: str) -> Principal | None:
    """The principal of a live session token, or None."""
    if not token.startswith(SESSION_PREFIX) or len(token) > MAX_TOKEN_LENGTH:
        return None
    row = AuthSessionRepository(session).by_hash(SESSION, token_hash(secret, token))
    if row is None or row.expires_at <= utcnow():
        return None
    return _principal(session, KeyRepository(session).get(row.key_id), "session")


def end_session(session: Session, secret: bytes, token: str) -> None:
    """Sign out: forget the session (an unknown token changes nothing)."""
    sessions = AuthSessionRepository(session)
    row = sessions.by_hash(SESSION, token_hash(secret, token))
    if row is not None:
        sessions.remove(row.id)


def _add_session(session: Session, secret: bytes, key: ApiKey, kind: str, ttl: dt.timedelta) -> str:
    token = new_token(LOGIN_PREFIX if kind == LOGIN else SESSION_PREFIX)
    now = utcnow()
    AuthSessionRepository(session).add(
        AuthSession(
            id=new_id(),
            key_id=key.id,
            kind=kind,
            token_hash=token_hash(secret, token),
            created_at=now,
            expires_at=now + ttl,
        )
    )
    return token


def _principal(
    session: Session, key: ApiKey | None, via: Literal["key", "session"]
) -> Principal | None:
    if key is None or key.revoked_at is not None:
        return None
    project = ProjectRepository(session).get(key.project_id)
    if project is None:
        return None
    now = utcnow()
    if key.last_used_at is None or now - key.last_used_at > TOUCH_EVERY:
        KeyRepository(session).touch(key.id, now)
    return Principal(
        key_id=key.id,
        key_name=key.name,
        role=key.role,
        project_id=project.id,
        project_name=project.name,
        via=via,
    )
