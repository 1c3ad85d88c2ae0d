"""``.../checkpoints/{checkpoint_id}/export``: a checkpoint as a file to use elsewhere
(docs/using-results.md)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Query, Request
from fastapi.responses import FileResponse
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool

from api.auth import ExperimentId, project_router
from api.deps import CheckpointId, ServicesDep
from api.errors import ApiError, ErrorResponse, error_responses
from api.exports import SUFFIXES, PolicyExporter
from api.owned import checkpoint_or_404
from core.experiments.checkpoints import CheckpointRepository
from core.models import Checkpoint

router = project_router("/v1/experiments", ["artifacts"])

ExportFormat = Annotated[
    Literal["safetensors", "onnx"],
    Query(
        description="`safetensors`: the policy-only export, the acting network's tensors and "
        "the checkpoint's manifest marked `contents: policy`, whose `network` lays the policy out "
        "for a NumPy reader. `onnx`: the same policy as an ONNX model (inputs `obs`, "
        "`action_mask` for discrete actions, `memory` for a recurrent policy; outputs `actions` "
        "and `scores` or `env_actions`, and `memory_out`), the manifest in its metadata "
        "(docs/using-results.md)."
    ),
]

_DESCRIPTION = (
    "The checkpoint's policy alone, as a safetensors file (`format=safetensors`, the default) or "
    "an ONNX model (`format=onnx`). The safetensors file holds the acting network's tensors "
    "(`actor.*`, or `agent.*` for Weighted QMIX; every group's and team's) and the checkpoint's "
    "manifest marked `contents: policy` with the network's layout (`network`), with no optimiser "
    "state, critic, target network, random state or replay buffer; `learners.policy.load_policy` "
    "loads it as it loads a checkpoint, and it cannot resume a run. The ONNX model computes the "
    "same greedy actions (onnxruntime runs it) for a checkpoint of any backend. Made from the "
    "stored checkpoint at each request (checked against its SHA-256 first); `ETag` is the "
    "export's own SHA-256."
)
_RESPONSES = {
    200: {"content": {"application/octet-stream": {}}, "description": "The export."},
    **error_responses(404, 422),
    409: {"model": ErrorResponse, "description": "`export_failed`: the file holds no policy."},
    410: {
        "model": ErrorResponse,
        "description": "`file_corrupt`: the checkpoint's file does not match its SHA-256.",
    },
    503: {
        "model": ErrorResponse,
        "description": "`storage_unavailable`: the artifact storage cannot be reached.",
    },
}


def _exporter(request: Request) -> PolicyExporter:
    # One per process, made on first use: its bound on parallel exports is the process's.
    state = request.app.state
    exporter: PolicyExporter | None = getattr(state, "policy_exporter", None)
    if exporter is None:
        exporter = PolicyExporter(state.services.storage)
        state.policy_exporter = exporter
    return exporter


def _best(services: ServicesDep, experiment_id: str) -> Checkpoint:
    with services.session_factory() as session:
        row = CheckpointRepository(session).best(experiment_id)
    if row is None:
        raise ApiError(
            404, "not_found", f"{experiment_id} has no checkpoint with an evaluation return yet"
        )
    return row


def _named(services: ServicesDep, experiment_id: str, checkpoint_id: str) -> Checkpoint:
    with services.session_factory() as session:
        return checkpoint_or_404(session, experiment_id, checkpoint_id)


async def _export(
    request: Request,
    experiment_id: str,
    row: Checkpoint,
    format: str,  # noqa: A002 (the query parameter's name)
) -> FileResponse:
    made = await run_in_threadpool(_exporter(request).export, row, format)
    return FileResponse(
        made.path,
        media_type="application/octet-stream",
        filename=f"{experiment_id}-step{row.step}-{SUFFIXES[format]}",
        headers={"etag": f'"{made.sha256}"', "cache-control": "no-cache"},
        background=BackgroundTask(made.path.unlink, missing_ok=True),
    )


@router.get(
    "/{experiment_id}/checkpoints/best/export",
    response_class=FileResponse,
    summary="Export the best checkpoint's policy",
    description=f"{_DESCRIPTION} The checkpoint is the run's best (the one marked `best`).",
    responses=_RESPONSES,
)
async def export_best_checkpoint(
    experiment_id: ExperimentId,
    request: Request,
    services: ServicesDep,
    format: ExportFormat = "safetensors",  # noqa: A002 (the query parameter's name)
) -> FileResponse:
    row = await run_in_threadpool(_best, services, experiment_id)
    return await _export(request, experiment_id, row, format)


@router.get(
    "/{experiment_id}/checkpoints/{checkpoint_id}/export",
    response_class=FileResponse,
    summary="Export a checkpoint's policy",
    description=_DESCRIPTION,
    responses=_RESPONSES,
)
async def export_checkpoint(
    experiment_id: ExperimentId,
    checkpoint_id: CheckpointId,
    request: Request,
    services: ServicesDep,
    format: ExportFormat = "safetensors",  # noqa: A002 (the query parameter's name)
) -> FileResponse:
    row = await run_in_threadpool(_named, services, experiment_id, checkpoint_id)
    return await _export(request, experiment_id, row, format)
