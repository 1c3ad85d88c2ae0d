"""Liveness (``/healthz``) and readiness (``/readyz``) for orchestrators and load balancers."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text

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
    "storage can be used (its directory writable, or its bucket there); 503 otherwise, with the "
    "reason per dependency in `checks`.",
    responses={503: {"model": Health, "description": "A dependency is down."}},
)
def readyz(services: ServicesDep) -> JSONResponse:
    checks = {
        "database": _database(services),
        "broker": _broker(services),
        "artifacts": services.storage.unreachable_reason() or "ok",
    }
    ready = all(v == "ok" for v in checks.values())
    body = Health(status="ok" if ready else "unavailable", checks=checks)
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)


def _database(services: ServicesDep) -> str:
    try:
        with services.session_factory() as session:
            session.execute(text("SELECT 1"))
    except Exception as exc:  # any failure means "not ready"
        return f"unreachable: {type(exc).__name__}: {exc}"
    return "ok"


def _broker(services: ServicesDep) -> str:
    return services.dispatcher.unreachable_reason() or "ok"
