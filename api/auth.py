"""The one dependency every project route takes: who is asking, and may they do this?

Routers of project data are made with ``project_router``, which attaches ``authorize`` to every
route they hold, so a new route cannot forget it (``tests/api/test_api_auth.py`` walks the app's
routes to hold that). ``authorize`` accepts ``Authorization: Bearer <key>`` or the dashboard's
session cookie, and asks for the ``viewer`` role on reads and ``member`` on writes; the key routes
ask for ``admin`` on top. The registry of workers (``/v1/workers``) is on such a router too,
though it is shared by all projects: any key may read it. A resource of another project is
answered exactly like one that does not exist (404), so its existence is not revealed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import Enum
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.security import APIKeyCookie, HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.exc import SQLAlchemyError

from api.deps import Services, ServicesDep
from api.errors import ApiError, error_responses
from api.owned import owned_or_404
from api.security import same_origin
from core.auth import Principal, authenticate_key, authenticate_session
from core.enums import Role
from core.experiments.repository import ExperimentRepository

SESSION_COOKIE = "marlforge_session"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_CHALLENGE = {"www-authenticate": 'Bearer realm="marlforge"'}


def _unauthenticated(message: str) -> ApiError:
    return ApiError(401, "unauthenticated", message, headers=_CHALLENGE)


def _bearer(header: str) -> str:
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise _unauthenticated("the Authorization header must be 'Bearer <key>'")
    return token.strip()


def still_authorized(request: Request, services: Services) -> Callable[[], bool]:
    """A check, for a response that outlives its request (an event stream), that the key or
    session the request came with is still live (not revoked, signed out or expired). Blocks on
    the database: run it in a thread."""
    header = request.headers.get("authorization")
    cookie = request.cookies.get(SESSION_COOKIE)

    def check() -> bool:
        with services.session_factory() as session:
            if header is not None:
                principal = authenticate_key(session, services.secret, _bearer(header))
            elif cookie:
                principal = authenticate_session(session, services.secret, cookie)
            else:
                return False
        return principal is not None and principal.role.allows(Role.VIEWER)

    return check


# Declared for the OpenAPI document only (``authorize`` reads the header and cookie itself): every
# route that needs a key says so (``security``), with either scheme, so client generators and
# fuzzers know to send one.
_BEARER_SCHEME = HTTPBearer(
    scheme_name="apiKey",
    description="An API key of the project: `Authorization: Bearer mfk_...`.",
    auto_error=False,
)
_COOKIE_SCHEME = APIKeyCookie(
    name=SESSION_COOKIE,
    scheme_name="session",
    description="The dashboard's session cookie (`POST /v1/session`).",
    auto_error=False,
)


def is_admin(request: Request, services: Services) -> bool:
    """Whether the request carries an admin key (``Authorization: Bearer``), for an open route
    that shows more to admins; never refuses (a bad key, or a database that cannot say, is
    False)."""
    header = request.headers.get("authorization")
    if header is None:
        return False
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return False
    try:
        with services.session_factory() as session:
            principal = authenticate_key(session, services.secret, token.strip())
    except SQLAlchemyError:
        return False
    return principal is not None and principal.role.allows(Role.ADMIN)


def authorize(
    request: Request,
    services: ServicesDep,
    _bearer_scheme: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER_SCHEME)],
    _cookie_scheme: Annotated[str | None, Depends(_COOKIE_SCHEME)],
) -> Principal:
    """The caller, who must hold a live key of a project and a role that allows the method."""
    header = request.headers.get("authorization")
    cookie = request.cookies.get(SESSION_COOKIE)
    with services.session_factory() as session:
        if header is not None:
            principal = authenticate_key(session, services.secret, _bearer(header))
        elif cookie:
            # A cookie rides along on any request the browser makes, also one another site
            # triggers: writes made with it must come from the dashboard's own origin.
            if request.method not in SAFE_METHODS and not same_origin(request.headers):
                raise ApiError(
                    403, "cross_origin", "a request made with the session cookie must come "
                    "from the dashboard's own origin",
                )  # fmt: skip
            principal = authenticate_session(session, services.secret, cookie)
        else:
            raise _unauthenticated("this route needs an API key: 'Authorization: Bearer mfk_...'")
        session.commit()  # the key's last-used time
    if principal is None:
        raise _unauthenticated("the API key or session is unknown, revoked or expired")
    needed = Role.VIEWER if request.method in SAFE_METHODS else Role.MEMBER
    _require(principal, needed)
    return principal


def _require(principal: Principal, needed: Role) -> None:
    if not principal.role.allows(needed):
        raise ApiError(
            403,
            "forbidden",
            f"the key {principal.key_name!r} has the role {principal.role}; this needs {needed}",
        )


def require_admin(principal: Annotated[Principal, Depends(authorize)]) -> Principal:
    """The caller, who must be an admin of their project."""
    _require(principal, Role.ADMIN)
    return principal


PrincipalDep = Annotated[Principal, Depends(authorize)]
AdminDep = Annotated[Principal, Depends(require_admin)]


def project_router(prefix: str, tags: Sequence[str | Enum]) -> APIRouter:
    """A router whose every route needs a key (``authorize``) and documents 401 and 403."""
    return APIRouter(
        prefix=prefix,
        tags=list(tags),
        dependencies=[Depends(authorize)],
        responses=error_responses(401, 403),
    )


def experiment_id_param(experiment_id: str, principal: PrincipalDep, services: ServicesDep) -> str:
    """An experiment id from the path, of the caller's project; anything else is not found."""
    with services.session_factory() as session:
        experiments = ExperimentRepository(session)

        def of_project(row_id: str, project_id: str) -> str | None:
            return row_id if experiments.project_of(row_id) == project_id else None

        return owned_or_404(of_project, "experiment", experiment_id, principal.project_id)


ExperimentId = Annotated[str, Depends(experiment_id_param)]
