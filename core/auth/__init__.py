"""Who is asking: projects, API keys with roles, dashboard sessions and one-time login tokens.

``tokens`` makes secrets and their keyed hashes; ``service`` creates, checks and revokes keys and
sessions; the API's one dependency (``api.auth``) turns a request into a ``Principal``.
"""

from core.auth.service import (
    KEY_PREFIX,
    AuthError,
    CreatedKey,
    Principal,
    authenticate_key,
    authenticate_session,
    create_key,
    create_login_token,
    end_session,
    ensure_project,
    find_project,
    key_of,
    list_keys,
    project_names,
    revoke_key,
    start_session,
)

__all__ = [
    "KEY_PREFIX",
    "AuthError",
    "CreatedKey",
    "Principal",
    "authenticate_key",
    "authenticate_session",
    "create_key",
    "create_login_token",
    "end_session",
    "ensure_project",
    "find_project",
    "key_of",
    "list_keys",
    "project_names",
    "revoke_key",
    "start_session",
]
