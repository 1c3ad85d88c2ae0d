"""Matches: one team's policy against another's in a competitive scenario, as a service.

A match names a scenario and, for each of its teams, a policy: a checkpoint of one of the
project's experiments (its latest when none is named) or uniform random play. Everything is
checked before anything is stored: the scenario and its kwargs, that every team of the scenario is
given exactly once, that each experiment and checkpoint exists in the project, and that the
checkpoint's policy fits the team's seats (agents, observation and action sizes, through
``learners.matches.fit_errors``, which needs no ML framework). The match is then queued on a
worker, which plays it (``workers.matches``) and records each team's mean return with a 95%
confidence interval, the scenario's own score and a replay.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError
from sqlalchemy.orm import Session

from core.db import utcnow
from core.dispatch.queue import Dispatcher
from core.enums import MatchStatus
from core.errors import Conflict
from core.experiments.checkpoints import CheckpointRepository
from core.experiments.repository import ExperimentRepository
from core.ids import ID_PATTERN, new_id
from core.matches.repository import MatchRepository
from core.models import Match
from learners.api import (
    Backend,
    EnvSpec,
    EnvSuite,
    FieldError,
    Label,
    SpecError,
    errors_from_validation,
)

_STRICT = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

RANDOM = "random"


class CheckpointChoice(BaseModel):
    """A team plays with the policy in a checkpoint of one of the project's experiments."""

    model_config = _STRICT

    experiment_id: str = Field(pattern=ID_PATTERN)
    """The experiment whose checkpoint plays."""
    checkpoint_id: str | None = Field(default=None, pattern=ID_PATTERN)
    """The checkpoint; omitted: the experiment's latest at submission."""


class MatchEnv(BaseModel):  # type: ignore[no-redef]  # a field named kwargs (as EnvSpec)
    """The scenario played: a competitive MPE scenario and its constructor arguments."""

    model_config = _STRICT

    suite: Literal[EnvSuite.MPE] = EnvSuite.MPE
    """Matches are played in MPE scenarios (``mpe``)."""
    id: str = Field(min_length=1, max_length=100)
    """The scenario, e.g. ``simple_tag_v3``."""
    kwargs: dict[str, JsonValue] = Field(default_factory=dict)
    """Its constructor's arguments (``continuous_actions``, ``num_good``...), as in a spec."""


class MatchSpec(BaseModel):
    """What ``POST /v1/matches`` takes."""

    model_config = _STRICT

    name: Label = Field(default="", max_length=200)
    """A name for people (one line of printable text); empty: the teams' policies, e.g.
    ``maddpg@40000 vs random``."""
    env: MatchEnv
    teams: dict[str, CheckpointChoice | Literal["random"]]
    """Every team of the scenario, each once: ``"random"`` or a checkpoint."""
    episodes: int = Field(default=100, ge=1, le=1000)
    """Whole episodes to play; the confidence intervals are over them."""
    seed: int = Field(default=0, ge=0, le=2**31 - 1)
    """Seeds the episodes and the random teams: the same match played again gives the same
    result."""


def parse_match(data: Any) -> MatchSpec:
    """The submitted match, validated as JSON (no coercion), or ``SpecError`` naming each field."""
    if not isinstance(data, dict):
        raise SpecError([FieldError("body", "the match must be a JSON object")])
    try:
        spec = MatchSpec.model_validate_json(json.dumps(data), strict=True)
    except ValidationError as exc:
        raise SpecError(errors_from_validation(exc)) from None
    return spec


def submit(
    session: Session,
    dispatcher: Dispatcher,
    spec: MatchSpec,
    project_id: str,
    key_id: str | None,
    max_agent_steps: int | None = None,
) -> Match:
    """Check the match completely, store it queued and queue it; ``SpecError`` names every field
    at fault and stores nothing. ``max_agent_steps`` bounds what it may cost (``cost_error``)."""
    teams = _resolve_teams(session, spec, project_id)
    if max_agent_steps is not None and (error := cost_error(spec, max_agent_steps)) is not None:
        raise SpecError([error])
    backend = next(
        (Backend(t["backend"]) for t in teams.values() if isinstance(t, dict)), Backend.TORCH
    )
    now = utcnow()
    match = Match(
        id=new_id(),
        project_id=project_id,
        created_by_key_id=key_id,
        name=spec.name or _default_name(teams),
        env=spec.env.model_dump(mode="json"),
        teams=teams,
        episodes=spec.episodes,
        seed=spec.seed,
        backend=backend,
        status=MatchStatus.QUEUED,
        created_at=now,
        updated_at=now,
    )
    MatchRepository(session).add(match)
    session.commit()
    dispatcher.enqueue_match(match.id, backend, spec.env.suite)
    return match


def cost_error(spec: MatchSpec, max_agent_steps: int) -> FieldError | None:
    """The refusal of a match that would play more than ``max_agent_steps`` agent steps
    (episodes x agents x ``max_cycles``), naming ``episodes``, the likeliest to lower; None when
    it fits. Only for a match whose scenario and kwargs passed their checks."""
    from learners.api import mpe_agent_steps

    cost = mpe_agent_steps(env_spec(spec.env.model_dump(mode="json")), spec.episodes)
    if cost <= max_agent_steps:
        return None
    per_episode = cost // spec.episodes
    most = max(1, max_agent_steps // per_episode)
    return FieldError(
        "episodes",
        f"the match would play {cost:,} agent steps ({spec.episodes:,} episodes of "
        f"{per_episode:,}), more than this deployment's limit of {max_agent_steps:,} "
        f"(MARLFORGE_MATCH_MAX_AGENT_STEPS); play at most {most:,} episodes, or fewer agents or "
        "shorter episodes",
    )


def cancel(session: Session, match_id: str, by: str) -> Match:
    """Withdraw a queued or playing match (``by`` names who asked, for its reason): it is
    ``cancelled`` at once, and the worker playing it stops it within a poll
    (``workers.matches``). A match that already ended is a ``Conflict``."""
    matches = MatchRepository(session)
    for status in (MatchStatus.QUEUED, MatchStatus.RUNNING):
        if matches.move(match_id, status, MatchStatus.CANCELLED, reason=f"cancelled by {by}"):
            session.commit()
            break
    else:
        match = matches.get(match_id)
        ended = match.status.value if match is not None else "gone"
        raise Conflict(f"match {match_id} already {ended}; nothing to cancel")
    session.expire_all()
    match = matches.get(match_id)
    assert match is not None
    return match


def env_spec(env: dict[str, Any]) -> EnvSpec:
    """A match's stored scenario as the env spec ``learners`` plays."""
    return EnvSpec.model_validate({**env, "num_envs": 1})


def _resolve_teams(session: Session, spec: MatchSpec, project_id: str) -> dict[str, Any]:
    """Each team's policy as stored: ``"random"`` or the checkpoint's identity; every problem
    found, as ``SpecError``."""
    from learners.api import MATCH_SCENARIOS, env_kwarg_errors, kwarg_errors, scenario_teams

    if spec.env.id not in MATCH_SCENARIOS:
        known = ", ".join(MATCH_SCENARIOS)
        raise SpecError([FieldError("env.id", f"unknown mpe scenario {spec.env.id!r} ({known})")])
    match_env = env_spec(spec.env.model_dump(mode="json"))
    errors = kwarg_errors(EnvSuite.MPE, spec.env.id, spec.env.kwargs)
    if not errors:
        errors = env_kwarg_errors(match_env)  # the agent counts and sizes a worker may be asked
    expected = scenario_teams(EnvSuite.MPE, spec.env.id)
    missing = [t for t in expected if t not in spec.teams]
    extra = [t for t in spec.teams if t not in expected]
    if missing or extra:
        wrong = [f"missing: {', '.join(missing)}"] if missing else []
        wrong += [f"not its teams: {', '.join(extra)}"] if extra else []
        errors.append(
            FieldError(
                "teams",
                f"{spec.env.id} has the teams {', '.join(expected)}; give each exactly once "
                f"({'; '.join(wrong)})",
            )
        )
    if errors:
        raise SpecError(errors)
    resolved: dict[str, Any] = {}
    for team in expected:
        choice = spec.teams[team]
        if isinstance(choice, CheckpointChoice):
            found = _checkpoint(session, project_id, team, choice, match_env)
            if isinstance(found, FieldError):
                errors.append(found)
            else:
                resolved[team] = found
        else:
            resolved[team] = RANDOM
    if errors:
        raise SpecError(errors)
    return resolved


def _checkpoint(
    session: Session, project_id: str, team: str, choice: CheckpointChoice, match_env: EnvSpec
) -> dict[str, Any] | FieldError:
    from learners.api import fit_errors

    field = f"teams.{team}"
    experiment = ExperimentRepository(session).get(choice.experiment_id)
    if experiment is None or experiment.project_id != project_id:
        return FieldError(
            f"{field}.experiment_id", f"no experiment {choice.experiment_id} in this project"
        )
    checkpoints = CheckpointRepository(session)
    if choice.checkpoint_id is None:
        row = checkpoints.latest(experiment.id)
        if row is None:
            return FieldError(
                f"{field}.experiment_id", f"experiment {experiment.id} has no checkpoint yet"
            )
    else:
        row = checkpoints.get(experiment.id, choice.checkpoint_id)
        if row is None:
            return FieldError(
                f"{field}.checkpoint_id",
                f"experiment {experiment.id} has no checkpoint {choice.checkpoint_id} (it may "
                "have been pruned: only the newest checkpoint.keep_last are kept)",
            )
    trained_env = EnvSpec.model_validate(experiment.spec["env"])
    misfits = fit_errors(match_env, team, trained_env)
    if misfits:
        return FieldError(
            field,
            f"the policy of experiment {experiment.id} does not fit the {team} team's seats: "
            + "; ".join(misfits),
        )
    return {
        "experiment_id": experiment.id,
        "checkpoint_id": row.id,
        "step": row.step,
        "algorithm": str(experiment.algorithm),
        "backend": str(experiment.backend),
        "sha256": row.sha256,
    }


def _default_name(teams: dict[str, Any]) -> str:
    def label(choice: Any) -> str:
        return RANDOM if choice == RANDOM else f"{choice['algorithm']}@{choice['step']}"

    return " vs ".join(label(c) for c in teams.values())[:200]
