"""``/v1/sweeps``: studies of many configurations × seeds (``core.sweeps``): submit, list, read,
cancel, resume, and the summary (ranked configurations, IQM, bootstrap intervals, curves, CSV)."""

from __future__ import annotations

import contextlib
from typing import Annotated, Any

from fastapi import Depends, Path, Query, Response

from api import idempotency as idempotent
from api.auth import PrincipalDep, project_router
from api.deps import PageAfter, PageLimit, ServicesDep, SessionDep, json_body, json_request_body
from api.errors import check_cursor, error_responses, refused_as
from api.idempotency import IdempotencyKeyHeader
from api.owned import owned_or_404
from api.routes.experiments import actor_of
from api.schemas.sweeps import SummaryOut, SweepOut, SweepPage
from core.errors import BrokerUnavailable
from core.models import Sweep
from core.quotas import (
    check_project_limits,
    check_project_storage,
    kept_checkpoint_mib,
)
from core.sweeps import scheduler, service, space
from core.sweeps import summary as summaries
from core.sweeps.proposals import admission
from core.sweeps.repository import SweepRepository
from learners.api import ExperimentSpec, FieldError, SpecError

router = project_router("/v1/sweeps", ["sweeps"])

SPEC_SCHEMA_NAME = "SweepSpecInput"

SweepId = Annotated[str, Path(description="The sweep's id.")]


def _sweep(session: SessionDep, principal: PrincipalDep, sweep_id: SweepId) -> Sweep:
    return owned_or_404(SweepRepository(session).get, "sweep", sweep_id, principal.project_id)


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
    "running at once (and within the project's limit of active runs). With `search` "
    '`{"method": "asha", "rungs": [...], "reduction_factor": 3}` (or the same object as '
    "`early_stopping`) a run whose "
    "configuration's evaluation return at a rung is not among the best `max(1, n // η)` of the "
    "`n` configurations scored there so far stops at the rung and ends `succeeded` short of its "
    "budget, with the reason; rungs that miss a run's budget or evaluation grid are a 422 on "
    '`search.rungs` (`early_stopping.rungs`). With `search` (`{"method": "tpe", "trials": N}`) the '
    "configurations are not drawn up front: each is proposed by TPE over `space.random` from the "
    "results so far as room frees up under `max_concurrent`, and the corners of the space are "
    "checked at submission instead (a 422 names `space.random.<path>` and the value). With "
    '`search` `{"method": "pbt", "population": N, "round_steps": K}` N members train in '
    "rounds of K steps (round 0 drawn from `space.random`, member m with seed `space.seed + m`); "
    "after each round the bottom `quantile` continues a top member's checkpoint with its "
    "values perturbed, each round a run that continues a checkpoint (`init.what: run`) with "
    "the member's whole `schedule`, listed with its lineage in `configurations`. Only the "
    "algorithm's mutable hyperparameters may be searched (a 422 names the others). A sweep "
    "counts as one "
    "submission towards the project's rate; one whose runs' estimated checkpoints would take the "
    "project past `MARLFORGE_PROJECT_MAX_ARTIFACT_MB` is a 429. `Idempotency-Key` works as on "
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

        each_mib: list[float] = []
        admit_run = admission(services.settings)

        def admit(child: ExperimentSpec) -> ExperimentSpec:
            each_mib.append(kept_checkpoint_mib(child, services.settings))
            return admit_run(session, principal.project_id, child)

        expansion = space.expand(spec, admit)
    # A search's runs are not built yet: each may keep as much as the largest it can reach.
    wanted_mib = max(each_mib) * space.run_count(spec) if spec.proposes else sum(each_mib)
    check_project_limits(session, principal.project_id, services.settings, needs_slot=False)
    check_project_storage(session, principal.project_id, wanted_mib, services.settings)
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
        scheduler.advance(
            session,
            services.dispatcher,
            sweep_id,
            settings.project_max_active_runs,
            admission(settings),
        )


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
    return SummaryOut.of(summaries.summarize(session, sweep, metric))


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
