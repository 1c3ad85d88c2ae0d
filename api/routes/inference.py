"""``POST .../checkpoints/{checkpoint_id}/act`` (and ``best``, ``latest``): a checkpoint's policy
acting on observations sent in the request (``api.inference``; docs/using-results.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.types import DecoratedCallable
from pydantic import BaseModel, ConfigDict, Field, JsonValue
from starlette.concurrency import run_in_threadpool

from api.auth import ExperimentId, project_router
from api.deps import CheckpointId, ServicesDep, json_body
from api.errors import ApiError, ErrorResponse, error_responses
from api.inference import MAX_BATCH, PolicyCache, act
from api.owned import checkpoint_or_404
from api.security import MAX_ACT_BODY_BYTES
from core.models import Checkpoint
from core.repositories import CheckpointRepository

router = project_router("/v1/experiments", ["artifacts"])

ACT_SCHEMA_NAME = "ActRequest"


class ActRequest(BaseModel):
    """Observations to act on (the body is read as strict JSON and checked field by field)."""

    # The route refuses any other field (``api.inference.act``): the schema says so.
    model_config = ConfigDict(extra="forbid")

    observations: dict[str, JsonValue] | list[JsonValue] = Field(
        description="What the env returned: an object of per-agent observations (each a list of "
        "numbers, or a list of them for a batch; a value may be an object with `observation` and "
        "`action_mask`, as PettingZoo's masked envs give), or an array `(N, obs_dim)` "
        f"(`(obs_dim,)` for a single-agent env) with an optional leading batch axis. At most "
        f"{MAX_BATCH} observations per agent."
    )
    action_masks: dict[str, JsonValue] | None = Field(
        default=None,
        description="Per agent, 0/1 over its discrete actions (one list, or one per "
        "observation); every action is available when omitted.",
    )
    memory: list[JsonValue] | None = Field(
        default=None,
        description="A recurrent policy's memory `(batch, N, H)`, as the previous answer gave it; "
        "zeros (an episode's start) when omitted.",
    )


class ActResponse(BaseModel):
    """The policy's greedy actions."""

    actions: JsonValue = Field(
        description="In the env's own action space: an object of per-agent actions for an "
        "object of observations (ints for discrete actions, lists of numbers on the env's bounds "
        "for continuous ones; lists of them for a batch), an array for an array."
    )
    memory: list[JsonValue] | None = Field(
        description="A recurrent policy's memory after this step, `(batch, N, H)`: send it with "
        "the next observations of the same episodes. `null` for a feed-forward policy."
    )


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
