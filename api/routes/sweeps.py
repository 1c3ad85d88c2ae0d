"""``/v1/sweeps``: studies of many configurations × seeds (``core.sweeps``): submit, list, read,
cancel, resume, and the summary (ranked configurations, IQM, bootstrap intervals, curves, CSV)."""

from __future__ import annotations

import contextlib
import datetime as dt
from typing import Annotated, Any

from fastapi import Depends, Path, Query, Response
from pydantic import BaseModel, Field

from api import idempotency as idempotent
from api.auth import PrincipalDep, project_router
from api.deps import PageAfter, PageLimit, ServicesDep, SessionDep, json_body, json_request_body
from api.errors import ApiError, check_cursor, error_responses, refused_as
from api.idempotency import IdempotencyKeyHeader
from api.routes.experiments import actor_of
from api.schemas.common import Progress
from core.enums import ExperimentStatus
from core.errors import BrokerUnavailable
from core.ids import is_id
from core.models import Sweep
from core.quotas import check_project_limits, check_spec_bounds
from core.repositories.sweeps import SweepRepository
from core.sweeps import scheduler, service, space
from core.sweeps import summary as summaries
from core.sweeps.service import SweepStatus, SweepView
from learners.api import ExperimentSpec, FieldError, SpecError

router = project_router("/v1/sweeps", ["sweeps"])

SPEC_SCHEMA_NAME = "SweepSpecInput"

SweepId = Annotated[str, Path(description="The sweep's id.")]
Interval = tuple[float, float]


class ConfigurationOut(BaseModel):
    """One point of the search space."""

    key: str = Field(description="Its key within the sweep: `c0`, `c1`...")
    params: dict[str, Any] = Field(description="The value of each swept spec path.")


class SweepOut(BaseModel):
    """A sweep: what it trains, and where its runs stand."""

    id: str = Field(description="The sweep's id (a ULID: sorts by creation time).")
    name: str
    status: SweepStatus = Field(
        description="`running` while any run is pending, queued, running or cancelling; then "
        "`succeeded` (all did), `failed` (some failed; the others' results stand) or `cancelled`."
    )
    runs: dict[str, int] = Field(
        description="How many of its runs are in each status, and `total`."
    )
    progress: Progress = Field(description="Its runs' steps together.")
    configurations: list[ConfigurationOut]
    seeds: list[int]
    max_concurrent: int = Field(description="At most this many runs queued or running at once.")
    spec: dict[str, Any] = Field(description="The sweep as submitted, defaults filled in.")
    runs_url: str = Field(description="Its runs: `/v1/experiments?sweep_id=...`.")
    summary_url: str
    created_by_key_id: str | None
    created_at: dt.datetime

    @classmethod
    def of(cls, view: SweepView) -> SweepOut:
        sweep, counts = view.sweep, view.counts
        runs = {status.value: counts.by_status.get(status, 0) for status in ExperimentStatus}
        return cls(
            id=sweep.id,
            name=sweep.name,
            status=view.status,
            runs={**runs, "total": counts.total},
            progress=Progress.of(counts.step, counts.total_steps),
            configurations=[ConfigurationOut(**c) for c in sweep.configurations],
            seeds=sweep.seeds,
            max_concurrent=sweep.max_concurrent,
            spec=sweep.spec,
            runs_url=f"/v1/experiments?sweep_id={sweep.id}",
            summary_url=f"/v1/sweeps/{sweep.id}/summary",
            created_by_key_id=sweep.created_by_key_id,
            created_at=sweep.created_at,
        )


class SweepPage(BaseModel):
    """A page of sweeps, newest first."""

    items: list[SweepOut]
    next_after: str | None = Field(
        description="Pass as `after` to get the next page; null on the last page."
    )


class FinalOut(BaseModel):
    """The final values of a configuration's runs that succeeded, and their aggregates."""

    values: list[float] = Field(description="Each finished run's last value of the metric.")
    mean: float
    mean_ci95: Interval = Field(description="95% percentile-bootstrap interval of the mean.")
    iqm: float = Field(description="Interquartile mean (rliable's `trim_mean(x, 0.25)`).")
    iqm_ci95: Interval = Field(description="95% percentile-bootstrap interval of the IQM.")


class ImprovementOut(BaseModel):
    """How likely the best configuration's run beats a run of this one."""

    best: str = Field(description="The best configuration's key.")
    probability: float = Field(description="P(best > this) + P(equal) / 2 over pairs of runs.")
    ci95: Interval = Field(description="Its 95% bootstrap interval.")


class CurvePointOut(BaseModel):
    """The configuration's mean at one step of the sweep's common grid."""

    step: int
    mean: float
    low: float = Field(description="Lower end of the mean's 95% bootstrap interval.")
    high: float
    runs: int = Field(description="Runs with a value at this step.")


class ConfigSummaryOut(BaseModel):
    """One configuration, summarised."""

    key: str
    params: dict[str, Any]
    rank: int | None = Field(description="1 is the best IQM; null without a finished run.")
    runs: int
    succeeded: int
    failed: int
    active: int = Field(description="Runs not finished yet (pending, queued, running...).")
    experiment_ids: list[str]
    final: FinalOut | None = Field(description="Null until one of its runs has succeeded.")
    improvement: ImprovementOut | None = Field(
        description="P(best > this configuration); null for the best and the unranked."
    )
    curve: list[CurvePointOut]


class SummaryOut(BaseModel):
    """A sweep's configurations, ranked by the IQM of their runs' final values."""

    sweep_id: str
    metric: str
    params: list[str] = Field(description="The swept spec paths.")
    best: str | None = Field(description="The best configuration's key (null: none finished).")
    configurations: list[ConfigSummaryOut]


def _sweep(session: SessionDep, principal: PrincipalDep, sweep_id: SweepId) -> Sweep:
    row = SweepRepository(session).get(sweep_id, principal.project_id) if is_id(sweep_id) else None
    if row is None:
        raise ApiError(404, "not_found", f"no sweep with id {sweep_id!r}")
    return row


SweepDep = Annotated[Sweep, Depends(_sweep)]
MetricQuery = Annotated[
    str,
    Query(
        min_length=1,
        max_length=200,
        pattern=r"^[^\x00]*$",
        description="The metric to compare the runs by.",
    ),
]


@router.post(
    "",
    status_code=201,
    response_model=SweepOut,
    summary="Submit a sweep",
    description="Train a base spec over a search space (`space.grid`: values per spec path, "
    "every combination; `space.random`: a distribution per path, `num_samples` draws from "
    "`space.seed`) crossed with `seeds`. Every run's spec is built and validated before "
    "anything is stored: one bad run is a 422 naming the parameter (`space.grid.<path>`), its "
    "value and the reason, or the base's field (`base.<field>`), and nothing is created. The "
    "runs are stored `pending` and started oldest first, at most `max_concurrent` queued or "
    "running at once (and within the project's limit of active runs). A sweep counts as one "
    "submission towards the project's rate. `Idempotency-Key` works as on "
    "`POST /v1/experiments`.",
    responses=error_responses(400, 409, 413, 415, 422, 429),
    openapi_extra=json_request_body(SPEC_SCHEMA_NAME),
)
def create_sweep(
    body: Annotated[Any, Depends(json_body)],
    session: SessionDep,
    services: ServicesDep,
    principal: PrincipalDep,
    response: Response,
    idempotency_key: IdempotencyKeyHeader = None,
) -> SweepOut:
    claim, existing = idempotent.earlier(
        idempotency_key, "sweeps", body, session, principal.project_id
    )
    if existing is not None:
        return _created(session, service.get(session, existing), response, replayed=True)
    with refused_as("invalid_sweep", "the sweep"):
        spec = space.parse_sweep(body)
        _check_size(spec, services.settings.sweep_max_runs)

        def bounds(child: ExperimentSpec) -> None:
            check_spec_bounds(child, services.settings)

        expansion = space.expand(spec, bounds)
    check_project_limits(session, principal.project_id, services.settings, needs_slot=False)
    actor = actor_of(principal)
    if claim is None:
        sweep, created = service.submit(session, spec, expansion, principal.project_id, actor), True
    else:
        sweep, created = service.submit_once(
            session, spec, expansion, principal.project_id, actor, claim
        )
    _advance(session, services, sweep.id)
    return _created(session, sweep, response, replayed=not created)


def _check_size(spec: space.SweepSpec, limit: int) -> None:
    count = space.run_count(spec)
    if count > limit:
        reason = f"the sweep has {count} runs (configurations × seeds), more than {limit}"
        raise SpecError([FieldError("space", f"{reason} (MARLFORGE_SWEEP_MAX_RUNS)")])


def _advance(session: SessionDep, services: ServicesDep, sweep_id: str) -> None:
    # Start what fits now. A broker that is down leaves the runs pending (stored and answered
    # 201): the API's scheduler queues them once it is back.
    settings = services.settings
    with contextlib.suppress(BrokerUnavailable):
        scheduler.advance(session, services.dispatcher, sweep_id, settings.project_max_active_runs)


def _created(session: SessionDep, sweep: Sweep, response: Response, replayed: bool) -> SweepOut:
    idempotent.created(response, f"/v1/sweeps/{sweep.id}", replayed)
    return SweepOut.of(service.view(session, service.get(session, sweep.id)))


@router.get(
    "",
    response_model=SweepPage,
    summary="List sweeps",
    description="The project's sweeps, newest first, with cursor pagination (`after`).",
    responses=error_responses(422),
)
def list_sweeps(
    session: SessionDep, principal: PrincipalDep, limit: PageLimit = 50, after: PageAfter = None
) -> SweepPage:
    check_cursor(after, "a sweep")
    rows = SweepRepository(session).page(principal.project_id, limit + 1, after)
    items = [SweepOut.of(v) for v in service.views(session, rows[:limit])]
    return SweepPage(items=items, next_after=items[-1].id if len(rows) > limit else None)


@router.get(
    "/{sweep_id}",
    response_model=SweepOut,
    summary="Read a sweep",
    description="Its configurations, seeds, its runs' counts by status and their progress "
    "together. Its runs are listed by `GET /v1/experiments?sweep_id=...`.",
    responses=error_responses(404),
)
def get_sweep(sweep: SweepDep, session: SessionDep) -> SweepOut:
    return SweepOut.of(service.view(session, sweep))


@router.post(
    "/{sweep_id}/cancel",
    response_model=SweepOut,
    summary="Cancel a sweep",
    description="Cancel each of its runs that has not ended: pending and queued ones at once, "
    "running ones stop after a final checkpoint. Finished runs keep their results.",
    responses=error_responses(404),
)
def cancel_sweep(sweep: SweepDep, session: SessionDep, principal: PrincipalDep) -> SweepOut:
    service.cancel(session, sweep.id, actor_of(principal))
    return SweepOut.of(service.view(session, sweep))


@router.post(
    "/{sweep_id}/resume",
    response_model=SweepOut,
    summary="Resume a sweep",
    description="Each cancelled or failed run of the sweep becomes `pending` again and is "
    "started, within `max_concurrent`, from its latest checkpoint.",
    responses=error_responses(404),
)
def resume_sweep(
    sweep: SweepDep, session: SessionDep, services: ServicesDep, principal: PrincipalDep
) -> SweepOut:
    service.resume(session, sweep.id, actor_of(principal))
    _advance(session, services, sweep.id)
    return SweepOut.of(service.view(session, sweep))


@router.get(
    "/{sweep_id}/summary",
    response_model=SummaryOut,
    summary="Compare a sweep's configurations",
    description="Per configuration, from its runs that succeeded: each run's final value of "
    "`metric` (its last point), their mean and interquartile mean (IQM) with 95% percentile-"
    "bootstrap intervals over runs, the rank by IQM, and the probability that the best "
    "configuration's run beats one of this configuration (with its interval). Each "
    "configuration's curve is the mean over its runs (finished or not) on a step grid common "
    "to the sweep, with a 95% band. Recomputed from the runs on every request.",
    responses=error_responses(404, 422),
)
def sweep_summary(
    sweep: SweepDep, session: SessionDep, metric: MetricQuery = summaries.DEFAULT_METRIC
) -> SummaryOut:
    found = summaries.summarize(session, sweep, metric)
    ranked = [c for c in found.configurations if c.rank == 1]
    return SummaryOut.model_validate(
        {
            "sweep_id": found.sweep_id,
            "metric": found.metric,
            "params": found.params,
            "best": ranked[0].key if ranked else None,
            "configurations": [_config_out(c) for c in found.configurations],
        }
    )


def _config_out(c: summaries.ConfigSummary) -> dict[str, Any]:
    final = c.final
    better = c.improvement
    return {
        **{k: getattr(c, k) for k in ("key", "params", "rank", "runs", "succeeded", "failed")},
        "active": c.active,
        "experiment_ids": c.experiment_ids,
        "final": None if final is None else {
            "values": final.values,
            "mean": final.mean,
            "mean_ci95": (final.mean_ci95.low, final.mean_ci95.high),
            "iqm": final.iqm,
            "iqm_ci95": (final.iqm_ci95.low, final.iqm_ci95.high),
        },
        "improvement": None if better is None else {
            "best": better.best,
            "probability": better.probability,
            "ci95": (better.ci95.low, better.ci95.high),
        },
        "curve": [vars(p) for p in c.curve],
    }  # fmt: skip


@router.get(
    "/{sweep_id}/summary.csv",
    response_class=Response,
    summary="The summary as CSV",
    description="The ranked table of `GET /v1/sweeps/{id}/summary`: one row per configuration "
    "with a column per swept parameter, the counts, mean and IQM with their intervals, "
    "P(best > it) with its interval, and the final values (space-separated).",
    responses={
        200: {"content": {"text/csv": {}}, "description": "The table."},
        **error_responses(404, 422),
    },
)
def sweep_summary_csv(
    sweep: SweepDep, session: SessionDep, metric: MetricQuery = summaries.DEFAULT_METRIC
) -> Response:
    # A plain Response (no media type of its own): the route's error answers stay documented as
    # JSON, the 200 as text/csv.
    text = summaries.to_csv(summaries.summarize(session, sweep, metric))
    disposition = f'attachment; filename="sweep-{sweep.id}.csv"'
    return Response(
        text, media_type="text/csv; charset=utf-8", headers={"content-disposition": disposition}
    )
