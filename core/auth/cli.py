"""``marlforge keys ...`` for operators, and the local admin key of ``marlforge up``.

These talk to the database directly (as ``marlforge migrate`` does), so they work before any key
exists: they are how the first key of a deployment is made. Keys and login URLs are printed to
stdout for the person at the terminal and never go through logging.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy.orm import Session

from core import auth
from core.auth.tokens import server_secret
from core.enums import Role
from core.errors import ServiceError
from core.settings import Settings

ADMIN_KEY_FILE = "admin.key"
LOCAL_ADMIN_NAME = "local admin (marlforge up)"
DEFAULT_PROJECT = "default"


@contextmanager
def _session(settings: Settings) -> Iterator[Session]:
    from core.db import make_engine, make_session_factory

    engine = make_engine(settings.database_url)
    try:
        with make_session_factory(engine)() as session:
            yield session
    finally:
        engine.dispose()


def keys_create(settings: Settings, project: str, role: Role, name: str | None) -> int:
    """Create a key (and its project, when new); print the key alone on the last line."""
    try:
        with _session(settings) as session:
            row = auth.ensure_project(session, project)
            created = auth.create_key(
                session, server_secret(settings), row, role, name or f"{role} key"
            )
            session.commit()
    except ServiceError as exc:
        print(f"marlforge keys create: {exc.message}", file=sys.stderr)
        return 2
    key = created.key
    print(f"created {key.role} key {key.id} ({key.name!r}) of project {project!r}.")
    print("It is shown only now; send it as 'Authorization: Bearer <key>':")
    print(created.token)
    return 0


def keys_list(settings: Settings, project: str | None) -> int:
    """Print every key (of one project when given), revoked ones marked."""
    with _session(settings) as session:
        project_id = None
        if project is not None:
            found = auth.find_project(session, project)
            if found is None:
                print(f"marlforge keys list: no project {project!r}", file=sys.stderr)
                return 2
            project_id = found.id
        names = auth.project_names(session)
        rows = auth.list_keys(session, project_id)
    print(f"{'ID':<26}  {'PROJECT':<16}  {'ROLE':<6}  {'PREFIX':<12}  {'STATE':<7}  NAME")
    for key in rows:
        state = "revoked" if key.revoked_at is not None else "live"
        print(
            f"{key.id:<26}  {names[key.project_id]:<16}  {key.role:<6}  {key.prefix:<12}  "
            f"{state:<7}  {key.name}"
        )
    return 0


def keys_revoke(settings: Settings, key_id: str) -> int:
    """Revoke one key by its id."""
    try:
        with _session(settings) as session:
            key = auth.revoke_key(session, key_id)
            session.commit()
    except ServiceError as exc:
        print(f"marlforge keys revoke: {exc.message}", file=sys.stderr)
        return 2
    print(f"revoked key {key.id} ({key.name!r})")
    return 0


def local_login_url(settings: Settings, host: str, port: int) -> str:
    """``marlforge up``: the local admin key (made on the first start and kept in
    ``<var>/admin.key``, mode 0600) and a fresh one-time URL that signs the dashboard in with it."""
    path = settings.var_dir / ADMIN_KEY_FILE
    secret = server_secret(settings)
    with _session(settings) as session:
        token = path.read_text().strip() if path.is_file() else ""
        principal = auth.authenticate_key(session, secret, token) if token else None
        key = auth.key_of(session, principal.key_id) if principal is not None else None
        if key is None:
            project = auth.ensure_project(session, DEFAULT_PROJECT)
            created = auth.create_key(session, secret, project, Role.ADMIN, LOCAL_ADMIN_NAME)
            key = created.key
            _write_private(path, created.token + "\n")
        login = auth.create_login_token(session, secret, key)
        session.commit()
    shown_host = "127.0.0.1" if host in {"0.0.0.0", "::", ""} else host
    return f"http://{shown_host}:{port}/#login={login}"


def _write_private(path: Path, text: str) -> None:
    # Created 0600 from the start (never world-readable, not even for a moment), replaced whole.
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.unlink(missing_ok=True)
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(temporary, path)
