"""``POST .../checkpoints/{checkpoint_id}/act`` (and ``best``, ``latest``): a checkpoint's policy
acting on observations sent in the request (``api.inference``; docs/using-results.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.types import DecoratedCallable
from starlette.concurrency import run_in_threadpool

from api.auth import ExperimentId, project_router
from api.deps import CheckpointId, ServicesDep, json_body
from api.errors import ApiError, ErrorResponse, error_responses
from api.inference import MAX_BATCH, PolicyCache, act
from api.owned import checkpoint_or_404
from api.schemas.inference import ACT_SCHEMA_NAME, ActResponse
from api.security import MAX_ACT_BODY_BYTES
from core.experiments.checkpoints import CheckpointRepository
from core.models import Checkpoint

router = project_router("/v1/experiments", ["artifacts"])

_DESCRIPTION = (
    "Act with the checkpoint's policy: its greedy actions (no exploration noise, the mode of a "
    "distribution) for the observations in the body, as the policy-only export acts "
    "(`learners.policy.load_policy`). The policy is loaded once from the stored checkpoint "
    "(checked against its SHA-256) and kept in this API process's memory, "
    "`MARLFORGE_INFERENCE_CACHE_MB` (256) at most over all policies, least recently used out "
    f"first. At most {MAX_BATCH} observations per agent and a body of {MAX_ACT_BODY_BYTES} "
    "bytes; observations, masks or memory of the wrong shape are a 422 naming the field (the "
    "agent) and the shape expected."
)
_RESPONSES = {
    **error_responses(400, 404, 413, 415, 422),
    409: {"model": ErrorResponse, "description": "`policy_unavailable`: the file holds no policy."},
    410: {
        "model": ErrorResponse,
        "description": "`file_corrupt`: the checkpoint's file does not match its SHA-256.",
    },
    503: {
        "model": ErrorResponse,
        "description": "`storage_unavailable`: the artifact storage cannot be reached.",
    },
}
_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": f"#/components/schemas/{ACT_SCHEMA_NAME}"}}
        },
    }
}


def _cache(request: Request) -> PolicyCache:
    # One per process, made on first use: its memory bound is the process's.
    state = request.app.state
    cache: PolicyCache | None = getattr(state, "policy_cache", None)
    if cache is None:
        settings = state.services.settings
        cache = PolicyCache(state.services.storage, settings.inference_cache_mb << 20)
        state.policy_cache = cache
    return cache


def _row(services: ServicesDep, experiment_id: str, which: str) -> Checkpoint:
    with services.session_factory() as session:
        if which not in ("best", "latest"):
            return checkpoint_or_404(session, experiment_id, which)
        repository = CheckpointRepository(session)
        row = (
            repository.best(experiment_id) if which == "best" else repository.latest(experiment_id)
        )
    if row is None:
        kind = "with an evaluation return " if which == "best" else ""
        raise ApiError(404, "not_found", f"{experiment_id} has no checkpoint {kind}yet")
    return row


def _act(
    request: Request, services: ServicesDep, experiment_id: str, which: str, body: Any
) -> ActResponse:
    row = _row(services, experiment_id, which)
    policy = _cache(request).get(row)
    return ActResponse.model_validate(act(policy, body))


def _route(path: str, summary: str, extra: str) -> Callable[[DecoratedCallable], DecoratedCallable]:
    return router.post(
        path,
        response_model=ActResponse,
        summary=summary,
        description=f"{_DESCRIPTION}{extra}",
        responses=_RESPONSES,
        openapi_extra=_BODY,
    )


@_route(
    "/{experiment_id}/checkpoints/best/act",
    "Act with the best checkpoint's policy",
    " The checkpoint is the run's best (the one marked `best`).",
)
async def act_best(
    experiment_id: ExperimentId,
    request: Request,
    services: ServicesDep,
    body: Annotated[Any, Depends(json_body)],
) -> ActResponse:
    return await run_in_threadpool(_act, request, services, experiment_id, "best", body)


@_route(
    "/{experiment_id}/checkpoints/latest/act",
    "Act with the latest checkpoint's policy",
    " The checkpoint is the run's newest.",
)
async def act_latest(
    experiment_id: ExperimentId,
    request: Request,
    services: ServicesDep,
    body: Annotated[Any, Depends(json_body)],
) -> ActResponse:
    return await run_in_threadpool(_act, request, services, experiment_id, "latest", body)


@_route("/{experiment_id}/checkpoints/{checkpoint_id}/act", "Act with a checkpoint's policy", "")
async def act_checkpoint(
    experiment_id: ExperimentId,
    checkpoint_id: CheckpointId,
    request: Request,
    services: ServicesDep,
    body: Annotated[Any, Depends(json_body)],
) -> ActResponse:
    return await run_in_threadpool(_act, request, services, experiment_id, checkpoint_id, body)
