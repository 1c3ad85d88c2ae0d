"""``/v1/matches``: one team's policy against another's (``core.matches``): submit, list, read,
and the replay of one episode."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Path, Query, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from api.auth import PrincipalDep, project_router
from api.deps import PageAfter, PageLimit, ServicesDep, SessionDep, json_body, json_request_body
from api.downloads import whole_object
from api.errors import ApiError, check_cursor, error_responses, refused_as
from api.owned import owned_or_404
from api.schemas.matches import MatchOut, MatchPage
from core.enums import MatchStatus
from core.matches import service
from core.matches.repository import MatchRepository
from core.models import Match
from core.quotas import check_match_limits

router = project_router("/v1/matches", ["matches"])

SPEC_SCHEMA_NAME = "MatchSpecInput"

MatchId = Annotated[str, Path(description="The match's id.")]


def _match(session: SessionDep, principal: PrincipalDep, match_id: MatchId) -> Match:
    return owned_or_404(MatchRepository(session).get, "match", match_id, principal.project_id)


MatchDep = Annotated[Match, Depends(_match)]


@router.post(
    "",
    status_code=201,
    response_model=MatchOut,
    summary="Start a match",
    description="Play a competitive scenario with each team's seats taken by a policy: a "
    "checkpoint of one of the project's experiments (its latest when `checkpoint_id` is "
    'omitted) or `"random"`. Every team of the scenario is given exactly once. Everything is '
    "checked before anything is stored: a scenario or kwarg the catalogue does not offer, a "
    "team missing or unknown, an experiment or checkpoint not in the project, a policy whose "
    "agents, observation or action sizes do not fit the team's seats are each a 422 naming the "
    "field. The match is then queued on a worker; `GET /v1/matches/{id}` has its result. A "
    "project may have `MARLFORGE_PROJECT_MAX_ACTIVE_MATCHES` (4) matches queued or playing, and "
    "matches count against its submissions per minute: beyond either is a 429. A match may play "
    "`MARLFORGE_MATCH_MAX_AGENT_STEPS` (5,000,000) agent steps (episodes x agents x the "
    "scenario's `max_cycles`); more is a 422 naming `episodes`.",
    responses=error_responses(400, 413, 415, 422, 429, 503),
    openapi_extra=json_request_body(SPEC_SCHEMA_NAME),
)
def create_match(
    body: Annotated[Any, Depends(json_body)],
    session: SessionDep,
    services: ServicesDep,
    principal: PrincipalDep,
    response: Response,
) -> MatchOut:
    with refused_as("invalid_match", "the match"):
        spec = service.parse_match(body)
        check_match_limits(session, principal.project_id, services.settings)
        match = service.submit(
            session,
            services.dispatcher,
            spec,
            principal.project_id,
            principal.key_id,
            max_agent_steps=services.settings.match_max_agent_steps,
        )
    response.headers["location"] = f"/v1/matches/{match.id}"
    return MatchOut.of(match)


@router.get(
    "",
    response_model=MatchPage,
    summary="List matches",
    description="The project's matches, newest first, with cursor pagination (`after`).",
    responses=error_responses(422),
)
def list_matches(
    session: SessionDep,
    principal: PrincipalDep,
    limit: PageLimit = 50,
    after: PageAfter = None,
    status: Annotated[MatchStatus | None, Query(description="Only this status.")] = None,
) -> MatchPage:
    check_cursor(after, "a match")
    rows = MatchRepository(session).page(principal.project_id, limit + 1, after, status)
    items = [MatchOut.of(r) for r in rows[:limit]]
    return MatchPage(items=items, next_after=items[-1].id if len(rows) > limit else None)


@router.post(
    "/{match_id}/cancel",
    response_model=MatchOut,
    summary="Cancel a match",
    description="A queued or playing match is `cancelled` at once (its worker stops playing it "
    "within a second); one that already ended is a 409.",
    responses=error_responses(404, 409),
)
def cancel_match(match: MatchDep, session: SessionDep, principal: PrincipalDep) -> MatchOut:
    return MatchOut.of(service.cancel(session, match.id, principal.describe()))


@router.get(
    "/{match_id}",
    response_model=MatchOut,
    summary="Read a match",
    description="Its teams' policies, status and, once played, `result.teams.<team>` "
    "(`mean_return`, `ci95`), the scenario's `result.score` and a `replay_url`.",
    responses=error_responses(404),
)
def get_match(match: MatchDep) -> MatchOut:
    return MatchOut.of(match)


@router.get(
    "/{match_id}/replay.gif",
    response_class=StreamingResponse,
    summary="A replay of the match",
    description="One episode of the match (its first seed) as an animated GIF, from the "
    "artifact storage.",
    responses={
        200: {"content": {"image/gif": {}}, "description": "The GIF."},
        **error_responses(404),
        503: {"description": "`storage_unavailable`: the artifact storage cannot be reached."},
    },
)
async def match_replay(match: MatchDep, services: ServicesDep) -> StreamingResponse:
    if match.replay_path is None:
        raise ApiError(404, "not_found", f"match {match.id} has no replay (yet)")
    return await run_in_threadpool(
        whole_object,
        services.storage,
        match.replay_path,
        f"the replay of match {match.id}",
        media_type="image/gif",
        headers={"cache-control": "private, max-age=3600"},
    )
