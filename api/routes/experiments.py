"""``/v1/experiments``: submit, list, read, cancel and resume experiments."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Query, Response
from sqlalchemy.orm import Session

from api import idempotency as idempotent
from api.auth import ExperimentId, PrincipalDep, project_router
from api.deps import (
    PageAfter,
    PageLimit,
    Services,
    ServicesDep,
    SessionDep,
    json_body,
    json_request_body,
)
from api.errors import check_cursor, error_responses, refused_as
from api.idempotency import IdempotencyKeyHeader
from api.schemas.experiments import ExperimentOut, ExperimentPage
from core.auth import Principal
from core.enums import RESUMABLE_STATUSES, ExperimentStatus
from core.experiments import service, warm_start
from core.experiments.repository import ExperimentFilter, ExperimentRepository
from core.fleet import registry
from core.ids import ID_PATTERN
from core.models import Experiment
from core.quotas import (
    check_project_limits,
    check_project_storage,
    check_spec_bounds,
    kept_checkpoint_mib,
    resumed_checkpoint_mib,
)
from learners.api import (
    MAX_TAG_LENGTH,
    TAG_PATTERN,
    Algorithm,
    Backend,
    parse_edit,
    parse_spec,
)

router = project_router("/v1/experiments", ["experiments"])

SPEC_SCHEMA_NAME = "ExperimentSpecInput"


@router.post(
    "",
    status_code=201,
    response_model=ExperimentOut,
    summary="Submit an experiment",
    description="Validate the spec, store it with every default filled in and queue its run on "
    "the backend's workers. A spec for an (algorithm, backend) pair that is not built yet, an "
    "unknown hyperparameter, a bad value, `cuda` on a backend that cannot use a GPU (MindSpore), "
    "a size past a per-run limit, an estimated memory above the per-run budget, or more "
    "checkpoints written or kept than the deployment allows (`MARLFORGE_RUN_MAX_CHECKPOINTS`, "
    "`MARLFORGE_RUN_MAX_CHECKPOINT_MB`) is refused with 422 naming each field; nothing is "
    "stored then. A "
    "project with `MARLFORGE_PROJECT_MAX_ACTIVE_RUNS` runs queued or running, or that submitted "
    "`MARLFORGE_PROJECT_SUBMISSIONS_PER_MINUTE` in the last minute, or whose checkpoints and "
    "this run's estimated ones would pass `MARLFORGE_PROJECT_MAX_ARTIFACT_MB`, gets a 429 (with "
    "`Retry-After` for the rate).\n\n"
    "With an `Idempotency-Key` header (1 to 200 printable ASCII characters, e.g. a UUID) a retry "
    "is safe: a later request of the project with the same key and the same body (compared as "
    "canonical JSON) is answered 201 with the experiment the first one created, as it is now, "
    "and `Idempotent-Replayed: true`; nothing is stored or queued again. The same key with a "
    "different body is a 409 `idempotency_conflict`. Keys are kept at least 24 hours.",
    responses=error_responses(400, 409, 413, 415, 422, 429, 503),
    openapi_extra=json_request_body(SPEC_SCHEMA_NAME),
)
def create_experiment(
    body: Annotated[Any, Depends(json_body)],
    session: SessionDep,
    services: ServicesDep,
    principal: PrincipalDep,
    response: Response,
    idempotency_key: IdempotencyKeyHeader = None,
) -> ExperimentOut:
    claim, existing = idempotent.earlier(
        idempotency_key, "experiments", body, session, principal.project_id
    )
    if existing is not None:
        return _created(session, services, service.get(session, existing), response, replayed=True)
    with refused_as("invalid_spec", "the spec"):
        spec = parse_spec(body)
        check_spec_bounds(spec, services.settings)
        spec = warm_start.resolve(session, principal.project_id, spec)
    check_project_limits(session, principal.project_id, services.settings)
    wanted = kept_checkpoint_mib(spec, services.settings)
    check_project_storage(session, principal.project_id, wanted, services.settings)
    actor = actor_of(principal)
    if claim is None:
        experiment = service.submit(session, services.dispatcher, spec, principal.project_id, actor)
        return _created(session, services, experiment, response, replayed=False)
    experiment, created = service.submit_once(
        session, services.dispatcher, spec, principal.project_id, actor, claim
    )
    return _created(session, services, experiment, response, replayed=not created)


def _created(
    session: Session,
    services: Services,
    experiment: Experiment,
    response: Response,
    replayed: bool,
) -> ExperimentOut:
    idempotent.created(response, f"/v1/experiments/{experiment.id}", replayed)
    return one(session, services, experiment)


@router.get(
    "",
    response_model=ExperimentPage,
    summary="List experiments",
    description="Newest first, with cursor pagination: pass the page's `next_after` as `after` to "
    "read the next page. Filters combine with AND: `status`, `algorithm`, `backend`, `tag` "
    "(runs holding exactly this tag), `q` (runs whose name contains the text, ignoring case) "
    "and `sweep_id` (the runs of one sweep).",
    responses=error_responses(422),
)
def list_experiments(
    session: SessionDep,
    services: ServicesDep,
    principal: PrincipalDep,
    limit: PageLimit = 50,
    after: PageAfter = None,
    status: Annotated[ExperimentStatus | None, Query(description="Only this status.")] = None,
    algorithm: Annotated[Algorithm | None, Query(description="Only this algorithm.")] = None,
    backend: Annotated[Backend | None, Query(description="Only this backend.")] = None,
    tag: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=MAX_TAG_LENGTH,
            pattern=TAG_PATTERN,
            description="Only runs with exactly this tag.",
        ),
    ] = None,
    q: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=200,
            pattern=r"^[^\x00]*$",
            description="Only runs whose name contains this text (ignoring case).",
        ),
    ] = None,
    sweep_id: Annotated[
        str | None, Query(pattern=ID_PATTERN, description="Only the runs of this sweep.")
    ] = None,
) -> ExperimentPage:
    check_cursor(after, "an experiment")
    rows = ExperimentRepository(session).page(
        ExperimentFilter(
            project_id=principal.project_id,
            status=status,
            algorithm=algorithm,
            backend=backend,
            tag=tag,
            name_contains=q,
            sweep_id=sweep_id,
        ),
        limit + 1,
        after,
    )
    shown = rows[:limit]
    reasons = registry.status_reasons(session, shown, services.settings.worker_heartbeat_stale_s)
    items = [ExperimentOut.of(r, status_reason=reasons[r.id]) for r in shown]
    next_after = items[-1].id if len(rows) > limit else None
    return ExperimentPage(items=items, next_after=next_after)


@router.get(
    "/{experiment_id}",
    response_model=ExperimentOut,
    summary="Read an experiment",
    description="The spec, status (with its reason), progress, timestamps and latest metrics; "
    "the worker holding the run with its last heartbeat and lease; how many times it was "
    "restarted after losing a worker (`restarts` of `max_restarts`); the `device` it runs on; "
    "and, while it is queued, its `queue_position` in its queue's fair order across projects "
    "(its backend's queue, or that backend's GPU queue for a spec asking for `cuda`) and, "
    "when no GPU worker of its backend is registered for such a run, why it waits "
    "(`status_reason`).",
    responses=error_responses(404),
)
def get_experiment(
    experiment_id: ExperimentId, session: SessionDep, services: ServicesDep
) -> ExperimentOut:
    return one(session, services, service.get(session, experiment_id))


@router.patch(
    "/{experiment_id}",
    response_model=ExperimentOut,
    summary="Edit an experiment's name, tags or notes",
    description="Change `name`, `tags` (the whole list) or `notes` (the whole text), each given "
    "as in a spec; only the fields sent change, in the stored spec too. Anything else is a 422 "
    "naming the field: what a run trains is fixed at submission. The run's log records who "
    "changed what. Needs the member role.",
    responses=error_responses(400, 404, 413, 415, 422),
    openapi_extra=json_request_body("SpecEdit"),
)
def edit_experiment(
    experiment_id: ExperimentId,
    body: Annotated[Any, Depends(json_body)],
    session: SessionDep,
    services: ServicesDep,
    principal: PrincipalDep,
) -> ExperimentOut:
    with refused_as("invalid_request", "the edit"):
        changes = parse_edit(body)
    edited = service.edit(session, experiment_id, changes, actor_of(principal))
    return one(session, services, edited)


@router.post(
    "/{experiment_id}/cancel",
    response_model=ExperimentOut,
    summary="Cancel an experiment",
    description="A queued experiment becomes `cancelled` at once and never starts. A running one "
    "becomes `cancelling`: its worker writes a final checkpoint, stops and marks it `cancelled`. "
    "Cancelling a cancelled or cancelling experiment changes nothing; a finished one is a 409. "
    "A run whose worker was lost becomes `cancelled` once the worker's lease lapses.",
    responses=error_responses(404, 409),
)
def cancel_experiment(
    experiment_id: ExperimentId, session: SessionDep, services: ServicesDep, principal: PrincipalDep
) -> ExperimentOut:
    return one(session, services, service.cancel(session, experiment_id, actor_of(principal)))


@router.post(
    "/{experiment_id}/resume",
    response_model=ExperimentOut,
    summary="Resume a cancelled or failed experiment",
    description="Queue the run again with the same id; it continues from its latest checkpoint on "
    "the same step axis (metrics after that checkpoint are recomputed). Without a checkpoint it "
    "starts over. A sweep's run becomes `pending` and is queued when its sweep has a free slot. "
    "Other statuses are a 409. A resume counts as a submission: against the project's runs "
    "queued or running (a sweep's run waits for its sweep's slot instead), its submissions per "
    "minute and its checkpoint storage (`MARLFORGE_PROJECT_MAX_ARTIFACT_MB`); beyond any is a "
    "429.",
    responses=error_responses(404, 409, 429, 503),
)
def resume_experiment(
    experiment_id: ExperimentId, session: SessionDep, services: ServicesDep, principal: PrincipalDep
) -> ExperimentOut:
    experiment = service.get(session, experiment_id)
    if experiment.status in RESUMABLE_STATUSES:  # any other is the service's 409
        in_sweep = experiment.sweep_id is not None
        check_project_limits(
            session, principal.project_id, services.settings, needs_slot=not in_sweep
        )
        wanted = resumed_checkpoint_mib(session, experiment, services.settings)
        check_project_storage(session, principal.project_id, wanted, services.settings)
    resumed = service.resume(session, services.dispatcher, experiment_id, actor_of(principal))
    return one(session, services, resumed)


def one(session: Session, services: Services, experiment: Experiment) -> ExperimentOut:
    """The response about one experiment: with its queue position when it is queued, and why it
    waits when it waits for a GPU worker (``core.fleet.registry``)."""
    stale_s = services.settings.worker_heartbeat_stale_s
    reason = registry.status_reasons(session, [experiment], stale_s)[experiment.id]
    return ExperimentOut.of(
        experiment,
        queue_position=service.queue_position(session, experiment),
        status_reason=reason,
    )


def actor_of(principal: Principal) -> service.Actor:
    """The audit trail's name for the caller."""
    return service.Actor(key_id=principal.key_id, label=principal.describe())
