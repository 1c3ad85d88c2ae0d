"""``.../checkpoints/{checkpoint_id}/replay.gif``: one evaluation episode of a checkpoint."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from api.auth import ExperimentId, project_router
from api.deps import CheckpointId, ServicesDep
from api.downloads import stat_or_error, whole_object
from api.errors import ApiError, ErrorResponse, error_responses
from api.owned import checkpoint_or_404
from api.replays import ReplayError, ReplayFailure, ReplayRenderer
from core.models import Checkpoint

router = project_router("/v1/experiments", ["artifacts"])

_FAILURES = {
    ReplayFailure.FAILED: (500, "replay_failed"),
    ReplayFailure.TIMED_OUT: (504, "replay_timeout"),
    ReplayFailure.NOT_INSTALLED: (503, "replay_unavailable"),
    ReplayFailure.MISSING: (404, "file_missing"),
    ReplayFailure.CORRUPT: (410, "file_corrupt"),
    ReplayFailure.UNAVAILABLE: (503, "storage_unavailable"),
}


def _renderer(request: Request) -> ReplayRenderer:
    # One per process, made on first use: renders are shared by every request of the process.
    state = request.app.state
    renderer: ReplayRenderer | None = getattr(state, "replay_renderer", None)
    if renderer is None:
        renderer = ReplayRenderer(state.services.storage)
        state.replay_renderer = renderer
    return renderer


def _checkpoint(services: ServicesDep, experiment_id: str, checkpoint_id: str) -> Checkpoint:
    with services.session_factory() as session:
        row = checkpoint_or_404(session, experiment_id, checkpoint_id)
    stat_or_error(services.storage, row.path, f"checkpoint {checkpoint_id}")
    return row


@router.get(
    "/{experiment_id}/checkpoints/{checkpoint_id}/replay.gif",
    response_class=StreamingResponse,
    summary="Replay a checkpoint",
    description="An animated GIF of one evaluation episode (the first episode every evaluation "
    "of the run plays) with the checkpoint's greedy policy, rendered headless by the env's own "
    "`rgb_array` renderer. The first request fetches the checkpoint from the artifact storage "
    "(checked against its SHA-256) and renders it (seconds); the GIF is stored beside the "
    "checkpoint and later requests stream it from there.",
    responses={
        200: {"content": {"image/gif": {}}, "description": "The GIF."},
        **error_responses(404),
        410: {
            "model": ErrorResponse,
            "description": "`file_corrupt`: the checkpoint's file does not match its SHA-256.",
        },
        500: {"description": "The renderer failed; `error.message` says why."},
        503: {
            "description": "This API host lacks the checkpoint's framework (see docs), or the "
            "artifact storage cannot be reached (`storage_unavailable`)."
        },
        504: {"description": "Rendering took too long."},
    },
)
async def replay_gif(
    experiment_id: ExperimentId,
    checkpoint_id: CheckpointId,
    request: Request,
    services: ServicesDep,
) -> StreamingResponse:
    row = await run_in_threadpool(_checkpoint, services, experiment_id, checkpoint_id)
    try:
        key = await _renderer(request).gif(row)
    except ReplayError as exc:
        status, code = _FAILURES[exc.failure]
        raise ApiError(
            status, code, f"could not render the replay of checkpoint {checkpoint_id}: {exc}"
        ) from None
    return await run_in_threadpool(
        whole_object,
        services.storage,
        key,
        f"the replay of checkpoint {checkpoint_id}",
        media_type="image/gif",
        headers={"cache-control": "no-cache"},
    )
