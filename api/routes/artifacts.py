"""A run's outputs: metric series and checkpoint files."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query, Request, Response
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session

from api.auth import ExperimentId, project_router
from api.deps import CheckpointId, Services, ServicesDep, SessionDep
from api.downloads import object_response
from api.errors import ApiError, ErrorResponse, error_responses
from api.owned import checkpoint_or_404
from api.schemas.artifacts import CheckpointList, CheckpointOut, MetricPage, MetricPointOut
from core.experiments import service
from core.experiments.checkpoints import CheckpointRepository
from core.ids import MAX_INT64
from core.metrics.repository import MetricRepository
from core.models import Checkpoint
from learners.api import NO_NUL

router = project_router("/v1/experiments", ["artifacts"])


@router.get(
    "/{experiment_id}/metrics",
    response_model=MetricPage,
    summary="Read metric points",
    description="Points `{step, wall_time, name, value}` ordered by step then name. Page with "
    "`after_step` (the previous page's `next_after_step`); `names` is a comma-separated list.",
    responses=error_responses(404, 422),
)
def get_metrics(
    experiment_id: ExperimentId,
    session: SessionDep,
    names: Annotated[
        str | None,
        Query(max_length=4000, pattern=NO_NUL, description="Comma-separated metric names."),
    ] = None,
    after_step: Annotated[
        int | None, Query(ge=-1, le=MAX_INT64, description="Only points after this step.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=10000, description="Page size (in points).")] = 1000,
) -> MetricPage:
    service.get(session, experiment_id)
    wanted = [n.strip() for n in (names or "").split(",") if n.strip()]
    rows, next_after = MetricRepository(session).page(experiment_id, wanted, after_step, limit)
    return MetricPage(items=[MetricPointOut.of(r) for r in rows], next_after_step=next_after)


@router.get(
    "/{experiment_id}/checkpoints",
    response_model=CheckpointList,
    summary="List checkpoints",
    description="The kept checkpoints (the newest `checkpoint.keep_last`, and the best by "
    "evaluation return with `checkpoint.keep_best`), oldest first, each with its `eval_return`; "
    "the best is marked `best: true`.",
    responses=error_responses(404),
)
def list_checkpoints(experiment_id: ExperimentId, session: SessionDep) -> CheckpointList:
    service.get(session, experiment_id)
    checkpoints = CheckpointRepository(session)
    best = checkpoints.best(experiment_id)
    best_id = best.id if best is not None else None
    return CheckpointList(
        items=[CheckpointOut.of(r, best_id) for r in checkpoints.all_of(experiment_id)]
    )


@router.head(
    "/{experiment_id}/checkpoints/best/file",
    include_in_schema=False,
    response_class=StreamingResponse,
)
@router.get(
    "/{experiment_id}/checkpoints/best/file",
    response_class=StreamingResponse,
    summary="Download the best checkpoint",
    description="The run's checkpoint with the highest evaluation return (the one marked `best` "
    "in the list), served like any checkpoint's file (ETag, ranges, sha256-checked stream, "
    "presigned redirect). 404 while no checkpoint has an evaluation return.",
    responses={
        200: {"content": {"application/octet-stream": {}}, "description": "The file."},
        206: {"description": "The requested byte range."},
        307: {"description": "Download from the store (`MARLFORGE_DOWNLOAD_URL_TTL_S`)."},
        304: {"description": "The client's copy (`If-None-Match`) is current."},
        **error_responses(404, 503),
    },
)
def download_best_checkpoint(
    experiment_id: ExperimentId, request: Request, session: SessionDep, services: ServicesDep
) -> Response:
    row = CheckpointRepository(session).best(experiment_id)
    if row is None:
        raise ApiError(
            404, "not_found", f"{experiment_id} has no checkpoint with an evaluation return yet"
        )
    return _serve(experiment_id, row, request, session, services)


@router.head(
    "/{experiment_id}/checkpoints/{checkpoint_id}/file",
    include_in_schema=False,
    response_class=StreamingResponse,
)
@router.get(
    "/{experiment_id}/checkpoints/{checkpoint_id}/file",
    response_class=StreamingResponse,
    summary="Download a checkpoint",
    description="The file, streamed from the artifact storage (a directory or an S3 bucket) in "
    "chunks, with `Content-Length`, an `ETag` that is its SHA-256 (`If-None-Match` gives 304) "
    "and one byte `Range` (206; `If-Range` with the ETag). A whole download is checked against "
    "the SHA-256 as it streams: a file that does not match is cut short, never completed. When "
    "the deployment sets `MARLFORGE_DOWNLOAD_URL_TTL_S` and keeps artifacts in S3, a GET is a "
    "307 to a presigned URL of the store, valid that many seconds (ranges work there too); the "
    "307's `ETag` is the SHA-256 to check the downloaded bytes against.",
    responses={
        200: {"content": {"application/octet-stream": {}}, "description": "The file."},
        206: {"description": "The requested byte range."},
        307: {
            "description": "Download from the store: `Location` is a presigned URL "
            "(`MARLFORGE_DOWNLOAD_URL_TTL_S`), `ETag` the file's SHA-256."
        },
        304: {"description": "The client's copy (`If-None-Match`) is current."},
        **error_responses(404),
        410: {
            "model": ErrorResponse,
            "description": "`file_corrupt`: the stored file's size is not the recorded one.",
        },
        416: {"description": "The range is outside the file."},
        503: {
            "model": ErrorResponse,
            "description": "`storage_unavailable`: the artifact storage cannot be reached.",
        },
    },
)
def download_checkpoint(
    experiment_id: ExperimentId,
    checkpoint_id: CheckpointId,
    request: Request,
    session: SessionDep,
    services: ServicesDep,
) -> Response:
    row = checkpoint_or_404(session, experiment_id, checkpoint_id)
    return _serve(experiment_id, row, request, session, services)


def _serve(
    experiment_id: str, row: Checkpoint, request: Request, session: Session, services: Services
) -> Response:
    session.close()  # a download may stream for minutes: hold no connection meanwhile
    return object_response(
        request,
        services.storage,
        row.path,
        size=row.size_bytes,
        sha256=row.sha256,
        what=f"checkpoint {row.id}",
        filename=f"{experiment_id}-step{row.step}.ckpt",
        redirect_ttl_s=services.settings.download_url_ttl_s,
    )
