"""The FastAPI application: ``uvicorn --factory api.app:create_app``; ``marlforge api`` runs it.
Either way the app's lifespan starts the API's background loops (``api.background``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.openapi.utils import get_openapi
from sqlalchemy.orm import Session, sessionmaker

from api.background import start_background_loops
from api.deps import Services
from api.docs_pages import install_docs
from api.errors import install_error_handlers
from api.event_bus import install_event_bus
from api.monitoring import install_monitoring
from api.query_params import single_valued_query
from api.routes import (
    artifacts,
    catalogue,
    dashboard,
    environments,
    events,
    experiments,
    exports,
    health,
    inference,
    keys,
    matches,
    metrics,
    monitoring,
    replays,
    sweeps,
    workers,
)
from api.routes import session as session_routes
from api.schemas import inference as inference_schemas
from api.security import BrowserSafety
from core.auth.tokens import server_secret
from core.db import make_engine, make_session_factory
from core.dispatch.queue import CeleryDispatcher, Dispatcher
from core.matches.service import MatchSpec
from core.settings import Settings, get_settings
from core.storage import ArtifactStore, store_for
from core.sweeps.space import SweepSpec
from learners.api import SpecEdit, spec_json_schema

DESCRIPTION = """Training-as-a-service for multi-agent reinforcement learning.

Submit an experiment spec; a worker of its backend trains it; read its progress and metrics and
download its checkpoints. Every error is `{"error": {"code", "message", "fields"}}`.

Every route that reads or changes a project's data needs a key of that project, sent as
`Authorization: Bearer mfk_...` (or the dashboard's session cookie). `viewer` keys read, `member`
keys also submit, cancel and resume, `admin` keys also manage the project's keys. The registry of
workers (`/v1/workers`) is shared by all projects: any key may read it. Only `/healthz`,
`/readyz`, `/metrics` (Prometheus; counts over all projects, naming none), `/v1/algorithms` and the
sign-in route are open.
"""


def create_app(
    settings: Settings | None = None,
    *,
    session_factory: sessionmaker[Session] | None = None,
    dispatcher: Dispatcher | None = None,
    storage: ArtifactStore | None = None,
    background: bool | None = None,
) -> FastAPI:
    """The API for ``settings`` (the environment's by default); tests pass their own parts.

    ``background``: run the reaper, compactor, purger and sweep scheduler (``api.background``)
    while the app is up. By default they run when the app opens its own database (as every
    server does: ``create_app()``), and not when a test hands it a ``session_factory``, whose
    tests drive those loops themselves; pass ``True`` to run them on given parts too."""
    settings = settings or get_settings()
    owned_engine = None
    if session_factory is None:
        owned_engine = make_engine(settings.database_url)
        session_factory = make_session_factory(owned_engine)
    run_loops = owned_engine is not None if background is None else background
    dispatcher = dispatcher or CeleryDispatcher(settings)
    sessions = session_factory

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        loops = start_background_loops(settings, sessions, dispatcher) if run_loops else None
        try:
            yield
        finally:
            if loops is not None:
                loops.stop()
            if owned_engine is not None:
                owned_engine.dispose()

    app = FastAPI(
        title="MARLForge",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        dependencies=[Depends(single_valued_query)],
        docs_url=None,
        redoc_url=None,
    )
    app.state.services = Services(
        settings=settings,
        session_factory=session_factory,
        dispatcher=dispatcher,
        storage=storage or store_for(settings),
        secret=server_secret(settings),
    )
    app.add_middleware(BrowserSafety)
    install_error_handlers(app)
    install_event_bus(app, settings)
    install_monitoring(app)
    install_docs(app, settings)
    for router in (
        experiments.router,
        artifacts.router,
        events.router,
        replays.router,
        exports.router,
        inference.router,
        matches.router,
        sweeps.router,
        workers.router,
        metrics.router,
        keys.router,
        session_routes.router,
        catalogue.router,
        environments.router,
        health.router,
        monitoring.router,
        dashboard.router,
    ):
        app.include_router(router)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _openapi(app: FastAPI) -> dict[str, Any]:
    # The spec body is parsed by hand (so that a non-JSON body and every spec error share one
    # error shape); publish its schema, per algorithm, so clients still see what to send.
    if app.openapi_schema is None:
        schema = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        spec_schema, definitions = spec_json_schema()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for name, definition in definitions.items():
            components.setdefault(name, definition)
        components[experiments.SPEC_SCHEMA_NAME] = spec_schema
        components["SpecEdit"] = SpecEdit.model_json_schema()
        match_schema = MatchSpec.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, definition in match_schema.pop("$defs", {}).items():
            components.setdefault(name, definition)
        components[matches.SPEC_SCHEMA_NAME] = match_schema
        sweep_schema = SweepSpec.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, definition in sweep_schema.pop("$defs", {}).items():
            components.setdefault(name, definition)
        sweep_schema["properties"]["base"] = {
            "$ref": f"#/components/schemas/{experiments.SPEC_SCHEMA_NAME}",
            "description": "An experiment spec that every run starts from, without `seed`.",
        }
        components[sweeps.SPEC_SCHEMA_NAME] = sweep_schema
        act_schema = inference_schemas.ActRequest.model_json_schema(
            ref_template="#/components/schemas/{model}"
        )
        for name, definition in act_schema.pop("$defs", {}).items():
            components.setdefault(name, definition)
        components[inference_schemas.ACT_SCHEMA_NAME] = act_schema
        app.openapi_schema = schema
    return app.openapi_schema
