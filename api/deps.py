"""What routes receive: a database session, the dispatcher and the artifact storage.

``create_app`` puts them on ``app.state``; tests build the app with their own (a session bound to a
rolled-back transaction, a broker in a temporary folder).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Query, Request
from sqlalchemy.orm import Session, sessionmaker

from api.errors import ApiError, FieldProblem
from api.security import body_limit
from core.dispatch.queue import Dispatcher
from core.ids import ID_PATTERN, is_id
from core.settings import Settings
from core.storage import ArtifactStore

MAX_JSON_DEPTH = 32
"""Arrays and objects nested deeper than this are refused: no spec needs more than a few levels,
and Python's own recursion (the parser's, the validators') must never be what stops a request."""


@dataclass(frozen=True)
class Services:
    """The process-wide objects the routes use."""

    settings: Settings
    session_factory: sessionmaker[Session]
    dispatcher: Dispatcher
    storage: ArtifactStore
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
    """The request body parsed as strict JSON; 400 when it is not (``NaN`` and ``Infinity`` are
    not JSON numbers), 422 when it holds a number no field could use (one too large for a float,
    ``1e400``, or an integer of more than ``MAX_INT_DIGITS`` digits): refused here, before
    anything reads or stores them."""
    raw = await request.body()
    limit = body_limit(request.url.path)
    if len(raw) > limit:
        raise ApiError(413, "too_large", f"the body is larger than {limit} bytes")
    try:
        value = json.loads(
            raw, parse_constant=_no_constant, parse_float=_finite, parse_int=_bounded
        )
    except _NotJson as exc:
        raise _invalid(str(exc)) from None
    except _OutOfRange as exc:
        # JSON, and what the published schemas allow, but no field could use it.
        reason = str(exc)
        raise ApiError(
            422,
            "invalid_request",
            f"the request body holds {reason}",
            [FieldProblem(field="body", reason=reason)],
        ) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        reason = "empty" if not raw.strip() else f"not valid JSON ({exc})"
        raise _invalid(reason) from None
    except RecursionError:
        raise _invalid(f"nested more than {MAX_JSON_DEPTH} levels deep") from None
    if _depth(value) > MAX_JSON_DEPTH:
        raise _invalid(f"nested more than {MAX_JSON_DEPTH} levels deep")
    return value


MAX_INT_DIGITS = 30
"""Digits an integer in a body may have: far past any count, seed or step a spec can mean, and
short of Python's own limit (4,300 digits, past which its parser raises)."""


class _NotJson(ValueError):
    """A value strict JSON (RFC 8259) does not have: ``NaN``, ``Infinity``."""


class _OutOfRange(ValueError):
    """A JSON number no field could use: one past a float's range, an integer of too many digits."""


def _no_constant(name: str) -> Any:
    raise _NotJson(f"not valid JSON: {name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _OutOfRange(f"{text[:40]}, a number too large for a float")
    return value


def _bounded(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _OutOfRange(
            f"an integer of {len(text.lstrip('-')):,} digits (at most {MAX_INT_DIGITS})"
        )
    return int(text)


def _invalid(reason: str) -> ApiError:
    return ApiError(
        400,
        "invalid_json",
        f"the request body is {reason}",
        [FieldProblem(field="body", reason=reason)],
    )


def _depth(value: Any) -> int:
    """How deeply arrays and objects nest in ``value`` (iteratively: no recursion to exhaust)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


def checkpoint_id_param(checkpoint_id: str) -> str:
    """A checkpoint id from the path; a malformed one is not found (and never reaches SQL)."""
    if not is_id(checkpoint_id):
        raise ApiError(404, "not_found", f"no checkpoint {checkpoint_id[:40]!r}")
    return checkpoint_id


SessionDep = Annotated[Session, Depends(get_session)]
CheckpointId = Annotated[str, Depends(checkpoint_id_param)]
ServicesDep = Annotated[Services, Depends(get_services)]


def json_request_body(schema_name: str) -> dict[str, Any]:
    """The ``openapi_extra`` of a route that reads its JSON body by hand (``json_body``): the body
    is required and follows ``#/components/schemas/<schema_name>``."""
    schema = {"$ref": f"#/components/schemas/{schema_name}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


PageLimit = Annotated[int, Query(ge=1, le=500, description="Page size.")]
"""A list route's page size."""
PageAfter = Annotated[
    str | None,
    Query(
        json_schema_extra={"pattern": ID_PATTERN},
        description="Cursor: the last id of the previous page.",
    ),
]
"""A list route's cursor (checked by ``api.errors.check_cursor``)."""
