"""One JSON shape for every error the API returns.

``{"error": {"code": "...", "message": "...", "fields": [{"field": "...", "reason": "..."}]}}``:
``code`` is stable (clients branch on it), ``message`` is for people, and ``fields`` names each
bad field of a request by its dotted path. FastAPI's own validation errors, a body that is not
JSON, unknown routes and unexpected failures all come out in this shape.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException as StarletteHTTPException

from core.db import is_transient
from core.errors import BrokerUnavailable, Conflict, NotFound, QuotaExceeded, ServiceError
from core.ids import is_id
from learners.api import SpecError

log = logging.getLogger(__name__)


class FieldProblem(BaseModel):
    """One bad field of a request."""

    field: str = Field(description="Dotted path of the field, e.g. `hyperparameters.tau`.")
    reason: str = Field(description="Why the value was refused.")


class ErrorDetail(BaseModel):
    """What went wrong."""

    code: str = Field(description="Stable machine-readable code, e.g. `invalid_spec`.")
    message: str = Field(description="A sentence for people.")
    fields: list[FieldProblem] = Field(default_factory=list, description="The fields at fault.")


class ErrorResponse(BaseModel):
    """The body of every error response."""

    error: ErrorDetail


class ApiError(Exception):
    """An error response raised from a route or dependency."""

    def __init__(
        self,
        status_code: int,
        code: str,
        message: str,
        fields: Sequence[FieldProblem] = (),
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.detail = ErrorDetail(code=code, message=message, fields=list(fields))
        self.headers = headers


@contextmanager
def refused_as(code: str, what: str) -> Iterator[None]:
    """Inside the block, a ``SpecError`` (a spec, an edit, a match or a sweep that cannot run)
    becomes a 422 with ``code``, saying ``what`` is invalid and naming every field at fault."""
    try:
        yield
    except SpecError as exc:
        fields = [FieldProblem(field=e.field, reason=e.reason) for e in exc.errors]
        raise ApiError(422, code, f"{what} is invalid: {exc}", fields) from None


_SERVICE_STATUS: dict[type[ServiceError], int] = {
    NotFound: 404,
    Conflict: 409,
    QuotaExceeded: 429,
    BrokerUnavailable: 503,
}
_HTTP_CODES = {
    400: "invalid_json",  # FastAPI's own: a body it could not parse
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
    415: "unsupported_media_type",
}


def check_cursor(after: str | None, what: str) -> None:
    """A list's ``after`` cursor must be an id (of ``what``: "an experiment", "a match"); a 422
    naming the parameter otherwise."""
    if after is not None and not is_id(after):
        reason = f"not {what} id"
        raise ApiError(
            422, "invalid_request", f"after: {reason}", [FieldProblem(field="after", reason=reason)]
        )


def error_json(
    status_code: int, detail: ErrorDetail, headers: dict[str, str] | None = None
) -> JSONResponse:
    """The response for ``detail``."""
    return JSONResponse(
        ErrorResponse(error=detail).model_dump(mode="json"),
        status_code=status_code,
        headers=headers,
    )


def _field_of(loc: Sequence[Any]) -> str:
    # ("body", "env", "id") -> "env.id"; ("query", "limit") -> "limit".
    parts = [str(p) for p in loc]
    if parts and parts[0] in {"body", "query", "path", "header"}:
        parts = parts[1:]
    return ".".join(parts) or "body"


async def _api_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return error_json(exc.status_code, exc.detail, exc.headers)


async def _service_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServiceError)
    status = next((s for t, s in _SERVICE_STATUS.items() if isinstance(exc, t)), 400)
    headers = None
    if isinstance(exc, QuotaExceeded) and exc.retry_after_s is not None:
        headers = {"retry-after": str(exc.retry_after_s)}
    return error_json(status, ErrorDetail(code=exc.code, message=exc.message), headers)


async def _validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    if any(e.get("type") == "json_invalid" for e in errors):
        detail = ErrorDetail(
            code="invalid_json",
            message="the request body is not valid JSON",
            fields=[FieldProblem(field="body", reason="not valid JSON")],
        )
        return error_json(400, detail)
    fields = [FieldProblem(field=_field_of(e.get("loc", ())), reason=_reason(e)) for e in errors]
    message = "; ".join(f"{f.field}: {f.reason}" for f in fields) or "invalid request"
    return error_json(422, ErrorDetail(code="invalid_request", message=message, fields=fields))


def _reason(error: Any) -> str:
    # A validator's own sentence, without pydantic's "Value error, " in front of it (as a spec's
    # errors read).
    context = error.get("ctx") or {}
    if error.get("type") == "value_error" and "error" in context:
        return str(context["error"])
    return str(error.get("msg", ""))


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    headers = {k.lower(): v for k, v in (exc.headers or {}).items()}
    message = str(exc.detail)
    fields: list[FieldProblem] = []
    if exc.status_code == 400:
        # FastAPI's "There was an error parsing the body", said in the API's words.
        message = "the request body is not valid JSON"
        fields = [FieldProblem(field="body", reason="not valid JSON (or nested too deeply)")]
    if exc.status_code == 405:
        # Starlette's Allow names only the first route that matched the path; a path served by
        # several routes (GET and POST of /v1/experiments) must list every method.
        allowed = allowed_methods(request.app, request.url.path)
        headers["allow"] = ", ".join(allowed)
        message = f"{request.method} is not allowed here; allowed: {', '.join(allowed)}"
    detail = ErrorDetail(code=code, message=message, fields=fields)
    return error_json(exc.status_code, detail, headers or None)


def allowed_methods(app: FastAPI, path: str) -> list[str]:
    """Every method some route of ``app`` serves at ``path`` (from the app's OpenAPI paths)."""
    table: list[tuple[re.Pattern[str], list[str]]] | None = getattr(
        app.state, "allowed_methods", None
    )
    if table is None:
        table = []
        for template, operations in app.openapi()["paths"].items():
            pattern = re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template))
            table.append((re.compile(f"^{pattern}$"), sorted(m.upper() for m in operations)))
        app.state.allowed_methods = table
    methods = {m for pattern, ops in table if pattern.match(path) for m in ops}
    return sorted(methods) or ["GET"]


async def _database_error(request: Request, exc: Exception) -> JSONResponse:
    if not is_transient(exc):
        return await _unexpected(request, exc)
    # The connection was lost (a restarted or failed-over server, a terminated connection): the
    # next request gets a new one.
    log.warning("database unavailable on %s %s: %s", request.method, request.url.path, exc)
    detail = ErrorDetail(
        code="database_unavailable", message="the database is unreachable; try again shortly"
    )
    return error_json(503, detail, {"retry-after": "1"})


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    detail = ErrorDetail(code="internal_error", message="an unexpected error occurred")
    return error_json(500, detail)


def install_error_handlers(app: FastAPI) -> None:
    """Route every error through the one JSON shape."""
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(DBAPIError, _database_error)
    app.add_exception_handler(Exception, _unexpected)


# For the OpenAPI ``responses=`` of each route.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse, "description": text}
    for code, text in {
        400: "The body is not JSON.",
        401: "No API key or session, or one that is unknown, revoked or expired.",
        403: "The key's role does not allow this, or a write came from another origin.",
        404: "No such resource in the caller's project (another project's is not revealed).",
        409: "The experiment's status does not allow this.",
        413: "The body is too large.",
        415: "The body is not declared as JSON (`Content-Type: application/json`).",
        422: "A field is invalid; `error.fields` names it.",
        429: "A project quota is reached; `Retry-After` says when to try again.",
        503: "The broker or the database is unreachable (`Retry-After` when it is the database).",
    }.items()
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI descriptions of these error statuses."""
    return {c: ERROR_RESPONSES[c] for c in codes}
