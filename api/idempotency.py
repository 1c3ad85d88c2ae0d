"""The ``Idempotency-Key`` header of the create routes (``core.idempotency`` keeps the keys):
one declaration for the OpenAPI schema and one check that names a bad header."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Header, Response
from sqlalchemy.orm import Session

from api.errors import ApiError, FieldProblem
from core.idempotency import service as idempotency

IdempotencyKeyHeader = Annotated[
    str | None,
    Header(
        alias="idempotency-key",
        json_schema_extra={
            "minLength": 1,
            "maxLength": idempotency.MAX_KEY_LENGTH,
            "pattern": idempotency.KEY_PATTERN,
        },
        description="Makes a retry safe: the same key and body return what the first request "
        "created (1 to 200 printable ASCII characters).",
    ),
]


def claim(header: str | None, scope: str, body: Any) -> idempotency.Claim | None:
    """The request's idempotency claim on ``scope``, None without the header; 400 naming a bad
    header."""
    if header is None:
        return None
    problem = idempotency.key_problem(header)
    if problem is not None:
        name = idempotency.HEADER
        raise ApiError(
            400, "invalid_header", f"{name}: {problem}", [FieldProblem(field=name, reason=problem)]
        )
    return idempotency.claim_of(header, scope, body)


def earlier(
    header: str | None, scope: str, body: Any, session: Session, project_id: str
) -> tuple[idempotency.Claim | None, str | None]:
    """The request's claim (None without the header) and, when the key was used before with the
    same body, the id of what that request created (409 ``idempotency_conflict`` when the body or
    the route differed)."""
    found = claim(header, scope, body)
    if found is None:
        return None, None
    return found, idempotency.lookup(session, project_id, found)


def created(response: Response, location: str, replayed: bool) -> None:
    """The headers of a 201: where the resource is, and whether it was created earlier."""
    response.headers["location"] = location
    if replayed:
        response.headers["idempotent-replayed"] = "true"
