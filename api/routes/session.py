"""``/v1/session``: the dashboard signs in with a key (or a one-time login token) and gets an
HttpOnly, SameSite=Strict session cookie; signing out forgets the session.

The cookie carries a random session token, not the key: only its keyed hash is stored, it expires
after seven days, and revoking the key ends it.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from api.auth import SESSION_COOKIE
from api.deps import ServicesDep, SessionDep
from api.errors import ApiError, error_responses
from api.schemas.session import SessionOut, SignIn
from core import auth
from core.auth.service import SESSION_TTL

router = APIRouter(prefix="/v1", tags=["session"])


@router.post(
    "/session",
    response_model=SessionOut,
    summary="Sign in (dashboard)",
    description="Exchange a key or a one-time login token for a session cookie "
    f"(`{SESSION_COOKIE}`: HttpOnly, SameSite=Strict, seven days). Requests made with the cookie "
    "must come from the dashboard's own origin when they change anything.",
    responses=error_responses(400, 401, 403, 413, 415, 422),
)
def sign_in(
    body: SignIn, request: Request, response: Response, session: SessionDep, services: ServicesDep
) -> SessionOut:
    try:
        token, principal = auth.start_session(session, services.secret, body.credential.strip())
    except auth.AuthError as exc:
        session.commit()  # an expired or used login token stays used
        raise ApiError(401, exc.code, exc.message) from None
    session.commit()
    response.set_cookie(
        SESSION_COOKIE,
        token,
        max_age=int(SESSION_TTL.total_seconds()),
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return SessionOut(
        project=principal.project_name,
        key_id=principal.key_id,
        key_name=principal.key_name,
        role=principal.role,
    )


@router.delete(
    "/session",
    status_code=204,
    summary="Sign out (dashboard)",
    description="Forget the session of the cookie and clear the cookie.",
    responses=error_responses(403),
)
def sign_out(request: Request, session: SessionDep, services: ServicesDep) -> Response:
    token = request.cookies.get(SESSION_COOKIE)
    if token:
        auth.end_session(session, services.secret, token)
        session.commit()
    response = Response(status_code=204)
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
    return response
