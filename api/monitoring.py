"""The API's Prometheus registry: the service's state (``core.monitoring``) and the latency of every
request this process answered.

Each app has a registry of its own (never ``prometheus_client``'s global one), so that several apps
in one process (the tests make hundreds) never share or clash. The latency histogram is this
process's: with several API processes, scrape each of them.

Its labels stay few whatever clients send: the route's path template (``/v1/experiments/{id}``,
never the id), a known method or ``other``, and the status code.
"""

from __future__ import annotations

import time

from fastapi import FastAPI
from prometheus_client import CollectorRegistry, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.monitoring.service import ServiceCollector

LATENCY = "marlforge_http_request_duration_seconds"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
UNMATCHED = "unmatched"
"""The route label of a request that no route answered: a path no route serves (404), or a request
refused before routing (``api.security``: a body that is not JSON or too large, a cross-origin
write)."""


def install_monitoring(app: FastAPI) -> None:
    """Give ``app`` its registry (``app.state.metrics_registry``) and time its requests. Call it
    after every other middleware is added, so that the time covers them too."""
    services = app.state.services
    registry = CollectorRegistry()
    registry.register(ServiceCollector(services.session_factory, services.settings))
    latency = Histogram(
        LATENCY,
        "Seconds from a request's arrival until its response starts (status and headers sent; a "
        "streamed body's transfer is not counted), by route template, method and status.",
        ["route", "method", "status"],
        registry=registry,
    )
    app.add_middleware(RequestLatency, histogram=latency)
    app.state.metrics_registry = registry


def get_registry(app: FastAPI) -> CollectorRegistry:
    """The app's registry."""
    registry: CollectorRegistry = app.state.metrics_registry
    return registry


class RequestLatency:
    """ASGI middleware: observe each HTTP request's latency in ``histogram``."""

    def __init__(self, app: ASGIApp, histogram: Histogram) -> None:
        self.app = app
        self.histogram = histogram

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        observed = False

        def observe(status: int) -> None:
            nonlocal observed
            observed = True
            method = scope["method"] if scope["method"] in METHODS else "other"
            self.histogram.labels(route_template(scope), method, str(status)).observe(
                time.perf_counter() - started
            )

        async def timed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                observe(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        except Exception:
            if not observed:
                observe(500)  # Starlette's outermost handler answers it with a 500
            raise


def route_template(scope: Scope) -> str:
    """The path template of the route that answered the request, or ``UNMATCHED``."""
    # FastAPI's router puts the route it chose on the scope, which is this same dict.
    path = getattr(scope.get("route"), "path", None)
    return path if isinstance(path, str) else UNMATCHED
