"""Liveness (``/healthz``) and readiness (``/readyz``) for orchestrators and load balancers."""

from __future__ import annotations

import re

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text

from api.auth import is_admin
from api.deps import ServicesDep
from api.schemas.health import Health

router = APIRouter(tags=["health"])


@router.get(
    "/healthz",
    response_model=Health,
    summary="Liveness",
    description="200 whenever the process serves requests; checks no dependency.",
)
def healthz() -> Health:
    return Health(status="ok")


@router.get(
    "/readyz",
    response_model=Health,
    summary="Readiness",
    description="200 when the database answers, the broker is reachable and the artifact "
    "storage can be used (its directory writable, or its bucket there); 503 otherwise. `checks` "
    "says `ok` or `unavailable` per dependency; with an admin key (`Authorization: Bearer`) it "
    "gives the reason instead of `unavailable` (hosts named, credentials in URLs left out). No "
    "key is needed.",
    responses={503: {"model": Health, "description": "A dependency is down."}},
)
def readyz(request: Request, services: ServicesDep) -> JSONResponse:
    checks = {
        "database": _database(services),
        "broker": _broker(services),
        "artifacts": services.storage.unreachable_reason() or "ok",
    }
    ready = all(v == "ok" for v in checks.values())
    if is_admin(request, services):
        shown = {name: _without_credentials(reason) for name, reason in checks.items()}
    else:
        shown = {name: "ok" if reason == "ok" else UNAVAILABLE for name, reason in checks.items()}
    body = Health(status="ok" if ready else UNAVAILABLE, checks=shown)
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)


UNAVAILABLE = "unavailable"
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]*@")


def _without_credentials(reason: str) -> str:
    """``reason`` with the user and password of every URL in it left out
    (``redis://:secret@host`` -> ``redis://***@host``)."""
    return _USERINFO.sub(r"\1***@", reason)


def _database(services: ServicesDep) -> str:
    try:
        with services.session_factory() as session:
            session.execute(text("SELECT 1"))
    except Exception as exc:  # any failure means "not ready"
        return f"unreachable: {type(exc).__name__}: {exc}"
    return "ok"


def _broker(services: ServicesDep) -> str:
    return services.dispatcher.unreachable_reason() or "ok"
