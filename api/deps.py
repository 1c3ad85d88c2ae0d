"""What routes receive: a database session, the dispatcher and the artifact storage.

``create_app`` puts them on ``app.state``; tests build the app with their own (a session bound to a
rolled-back transaction, a broker in a temporary folder).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from sqlalchemy.orm import Session, sessionmaker

from api.errors import ApiError, FieldProblem
from core.queue import Dispatcher
from core.settings import Settings
from core.storage import ArtifactStorage

MAX_BODY_BYTES = 1 << 20


@dataclass(frozen=True)
class Services:
    """The process-wide objects the routes use."""

    settings: Settings
    session_factory: sessionmaker[Session]
    dispatcher: Dispatcher
    storage: ArtifactStorage
    secret: bytes
    """The server secret that keys and sessions are hashed with (``core.auth.tokens``)."""


def get_services(request: Request) -> Services:
    """The app's services."""
    services: Services = request.app.state.services
    return services


def get_session(services: Annotated[Services, Depends(get_services)]) -> Iterator[Session]:
    """A session for one request, closed (and rolled back if uncommitted) afterwards."""
    with services.session_factory() as session:
        yield session


async def json_body(request: Request) -> Any:
    """The request body parsed as JSON; 400 when it is not JSON."""
    raw = await request.body()
    if len(raw) > MAX_BODY_BYTES:
        raise ApiError(413, "too_large", f"the body is larger than {MAX_BODY_BYTES} bytes")
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        reason = "empty" if not raw.strip() else f"not valid JSON ({exc})"
        raise ApiError(
            400,
            "invalid_json",
            f"the request body is {reason}",
            [FieldProblem(field="body", reason=reason)],
        ) from None


SessionDep = Annotated[Session, Depends(get_session)]
ServicesDep = Annotated[Services, Depends(get_services)]
