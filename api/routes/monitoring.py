"""``GET /metrics``: the service's metrics in Prometheus's text format, for a Prometheus server to
scrape (``api.monitoring``, ``core.monitoring``; the chart metrics of runs are ``/v1/metrics``)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from api.monitoring import get_registry

router = APIRouter(tags=["health"])


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    description="The service's metrics in Prometheus's text exposition format: runs by status "
    "and backend, queued runs and broker messages per backend queue, takeovers of lost workers "
    "and restarts, failed runs by the class of their reason, and this process's request latency "
    "by route. Open, like `/healthz`: every figure is a count over all projects, and no label "
    "names a project, an experiment or a key. Each scrape runs a few aggregate queries. The "
    'metrics are listed in docs/deployment.md, "Monitoring".',
    response_class=Response,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
)
def prometheus_metrics(request: Request) -> Response:
    return Response(generate_latest(get_registry(request.app)), media_type=CONTENT_TYPE_LATEST)
