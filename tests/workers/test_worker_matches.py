"""Playing matches on a worker (``workers.matches.play``, what the Celery task calls), on
PostgreSQL with real commits, a real checkpoint trained by the worker path and the real learners:
a played match records each team's result and its replay in the store; a checkpoint that is gone
or not the one chosen fails the match with the reason; a match is played once."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from core.dispatch.queue import CeleryDispatcher
from core.enums import MatchStatus
from core.matches import service
from core.models import Checkpoint, Match
from core.storage import FilesystemStore
from tests.auth_support import default_project_id
from workers.matches import play
from workers.outcome import Outcome, RunLimits
from workers.runs.job import run_experiment

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TAG = {"suite": "mpe", "id": "simple_tag_v3", "kwargs": {"continuous_actions": True}}


@pytest.fixture
def predators(
    submit: Callable[..., str],
    session_factory: sessionmaker[Session],
    storage: FilesystemStore,
    limits: RunLimits,
) -> str:
    """A MADDPG run on simple_tag, trained by the worker path to a few checkpoints."""
    experiment_id = submit(
        {
            "name": "predators",
            "algorithm": "maddpg",
            "backend": "torch",
            "env": {**TAG, "num_envs": 1},
            "total_steps": 300,
            "hyperparameters": {"hidden_sizes": [16], "learning_starts": 100, "batch_size": 32},
            "evaluation": {"every_steps": 300, "episodes": 1},
            "checkpoint": {"every_steps": 150, "keep_last": 2},
        }
    )
    assert run_experiment(experiment_id, session_factory, storage, limits) == Outcome.DONE
    return experiment_id


@pytest.fixture
def match_of(
    dispatcher: CeleryDispatcher, session_factory: sessionmaker[Session]
) -> Iterator[Callable[..., str]]:
    def make(teams: dict[str, Any], episodes: int = 6, seed: int = 3) -> str:
        spec = service.parse_match({"env": TAG, "teams": teams, "episodes": episodes, "seed": seed})
        with session_factory() as session:
            project_id = default_project_id(session)
            return service.submit(session, dispatcher, spec, project_id, None).id

    yield make


def _match(session_factory: sessionmaker[Session], match_id: str) -> Match:
    with session_factory() as session:
        row = session.get(Match, match_id)
        assert row is not None
        session.expunge(row)
        return row


def test_a_match_is_played_once_and_records_each_teams_result_and_a_replay(
    predators: str,
    match_of: Callable[..., str],
    session_factory: sessionmaker[Session],
    storage: FilesystemStore,
    limits: RunLimits,
) -> None:
    match_id = match_of({"adversary": {"experiment_id": predators}, "agent": "random"})
    again = match_of({"adversary": {"experiment_id": predators}, "agent": "random"})

    assert play(match_id, session_factory, storage, limits, "w-1") == Outcome.DONE
    assert play(again, session_factory, storage, limits, "w-1") == Outcome.DONE

    row = _match(session_factory, match_id)
    assert row.status == MatchStatus.SUCCEEDED, row.status_reason
    assert row.worker_id == "w-1" and row.finished_at is not None
    assert row.result is not None and row.result["episodes"] == 6
    assert set(row.result["teams"]) == {"adversary", "agent"}
    for team in row.result["teams"].values():
        low, high = team["ci95"]
        assert low <= team["mean_return"] <= high
    assert set(row.result["score"]) == {"collisions_per_episode"}
    assert row.replay_path == f"matches/{match_id}/replay.gif"
    assert b"".join(storage.read(row.replay_path)).startswith(b"GIF8")
    # The same match spec and seed played again gives the same result.
    assert _match(session_factory, again).result == row.result
    # A second delivery of a played match's message plays nothing.
    assert play(match_id, session_factory, storage, limits, "w-2") == Outcome.DONE
    assert _match(session_factory, match_id).worker_id == "w-1"
    # The worker's copies of the checkpoints are gone.
    assert not (storage.cache_dir / "matches" / match_id).exists()


@pytest.mark.parametrize("fault", ["deleted", "rewritten"])
def test_a_checkpoint_gone_or_not_the_chosen_one_fails_the_match_with_the_reason(
    predators: str,
    match_of: Callable[..., str],
    session_factory: sessionmaker[Session],
    storage: FilesystemStore,
    limits: RunLimits,
    fault: str,
) -> None:
    match_id = match_of({"adversary": "random", "agent": {"experiment_id": predators}})
    with session_factory() as session:
        latest = session.scalars(
            select(Checkpoint)
            .where(Checkpoint.experiment_id == predators)
            .order_by(Checkpoint.step.desc())
        ).first()
        assert latest is not None
        key, checkpoints_before = latest.path, session.scalars(select(Checkpoint.id)).all()
    if fault == "deleted":
        storage.delete(key)
    else:
        storage.put(key, lambda path: path.write_bytes(b"not the chosen weights"))

    assert play(match_id, session_factory, storage, limits, "w-1") == Outcome.DONE

    row = _match(session_factory, match_id)
    assert row.status == MatchStatus.FAILED and row.result is None
    assert row.status_reason is not None
    assert row.status_reason.startswith("the agent team's checkpoint could not be fetched from ")
    with session_factory() as session:  # nothing of the run was touched
        assert session.scalars(select(Checkpoint.id)).all() == checkpoints_before
