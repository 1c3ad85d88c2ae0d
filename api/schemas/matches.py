"""The bodies of ``/v1/matches``: a match, its result, and pages of them."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, Field

from core.enums import MatchStatus
from core.models import Match
from learners.api import Backend, EnvSuite, scenario_teams


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
