"""``/v1/matches``: one team's policy against another's (``core.matches``): submit, list, read,
and the replay of one episode."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

from fastapi import Depends, Path, Query, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from api.auth import PrincipalDep, project_router
from api.deps import PageAfter, PageLimit, ServicesDep, SessionDep, json_body, json_request_body
from api.downloads import whole_object
from api.errors import ApiError, check_cursor, error_responses, refused_as
from core import matches as service
from core.enums import MatchStatus
from core.ids import is_id
from core.models import Match
from core.repositories.matches import MatchRepository
from learners.api import Backend, EnvSuite, scenario_teams

router = project_router("/v1/matches", ["matches"])

SPEC_SCHEMA_NAME = "MatchSpecInput"

MatchId = Annotated[str, Path(description="The match's id.")]


class TeamResultOut(BaseModel):
    """How one team did over the match's episodes."""

    mean_return: float = Field(description="The team's mean episode return.")
    ci95: tuple[float, float] = Field(
        description="The 95% confidence interval of that mean (Student's t over the episodes)."
    )


class MatchResultOut(BaseModel):
    """A played match's result."""

    episodes: int = Field(description="Episodes played.")
    teams: dict[str, TeamResultOut] = Field(description="Each team's mean return and its CI.")
    score: dict[str, float] = Field(
        description="The scenario's own score: simple_tag `collisions_per_episode`; "
        "simple_adversary `adversary_distance_to_goal` and `agents_distance_to_goal`; "
        "simple_push `agent_distance_to_goal` and `adversary_distance_to_goal`."
    )


class MatchOut(BaseModel):
    """A match: what each team plays with, its status and, once played, its result."""

    id: str = Field(description="The match's id (a ULID: sorts by creation time).")
    name: str
    env: dict[str, Any] = Field(description="The scenario: `suite`, `id`, `kwargs`.")
    teams: dict[str, Any] = Field(
        description='Per team: `"random"`, or the checkpoint it plays with: `experiment_id`, '
        "`checkpoint_id`, `step`, `algorithm`, `backend`, `sha256`."
    )
    episodes: int
    seed: int
    backend: Backend = Field(description="The workers' queue it is played from.")
    status: MatchStatus = Field(description="queued, running, succeeded, failed or cancelled.")
    status_reason: str | None = Field(description="Why it failed, or was requeued.")
    result: MatchResultOut | None = Field(description="Null until the match has been played.")
    replay_url: str | None = Field(
        description="A GIF of one episode of the match, once played (null if it could not be "
        "stored)."
    )
    worker_id: str | None = Field(description="The worker that played (or plays) it.")
    created_by_key_id: str | None
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None

    @classmethod
    def of(cls, row: Match) -> MatchOut:
        # JSONB keeps no key order: give the teams in the scenario's agent order.
        order = {team: i for i, team in enumerate(scenario_teams(EnvSuite.MPE, row.env["id"]))}
        result = dict(row.result) if row.result else None
        if result is not None:
            result["teams"] = _ordered(result["teams"], order)
        return cls(
            id=row.id,
            name=row.name,
            env=row.env,
            teams=_ordered(row.teams, order),
            episodes=row.episodes,
            seed=row.seed,
            backend=row.backend,
            status=row.status,
            status_reason=row.status_reason,
            result=MatchResultOut.model_validate(result) if result else None,
            replay_url=f"/v1/matches/{row.id}/replay.gif" if row.replay_path else None,
            worker_id=row.worker_id,
            created_by_key_id=row.created_by_key_id,
            created_at=row.created_at,
            started_at=row.started_at,
            finished_at=row.finished_at,
        )


def _ordered(teams: dict[str, Any], order: dict[str, int]) -> dict[str, Any]:
    return dict(sorted(teams.items(), key=lambda item: order.get(item[0], len(order))))


class MatchPage(BaseModel):
    """A page of matches, newest first."""

    items: list[MatchOut]
    next_after: str | None = Field(
        description="Pass as `after` to get the next page; null on the last page."
    )


def _match(session: SessionDep, principal: PrincipalDep, match_id: MatchId) -> Match:
    row = MatchRepository(session).get(match_id, principal.project_id) if is_id(match_id) else None
    if row is None:
        raise ApiError(404, "not_found", f"no match with id {match_id!r}")
    return row


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
    "field. The match is then queued on a worker; `GET /v1/matches/{id}` has its result.",
    responses=error_responses(400, 413, 415, 422, 503),
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
        match = service.submit(
            session, services.dispatcher, spec, principal.project_id, principal.key_id
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
