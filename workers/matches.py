"""Playing a match on a worker (the task in ``workers.tasks`` is a thin shell over ``play``).

The worker claims the match (``queued -> running``, conditional, so a second delivery of the same
message plays nothing), copies each team's checkpoint from the artifact store into its cache and
checks it against the sha256 recorded at submission, then plays in a child process under the same
guards as a run (``workers.supervisor``: memory budget, shutdown grace). The replay GIF goes to the
store; the result and the GIF's key go to the row, and the match ends ``succeeded``. A checkpoint
that is gone or corrupt, a policy that fails to load, a child that dies or runs out of memory ends
it ``failed`` with the reason. A worker shutting down puts the match back in the queue.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from core.db import retry_transient
from core.enums import MatchStatus
from core.matches.repository import MatchRepository
from core.matches.service import RANDOM, env_spec
from core.models import Checkpoint, Match
from core.settings import get_settings
from core.storage import ArtifactStore, StoreError, verified_copy
from workers.outcome import Outcome, RunLimits
from workers.supervisor import Ending, supervise
from workers.threads import limit_threads

log = logging.getLogger(__name__)

M = MatchStatus


@dataclass(frozen=True)
class MatchJob:
    """What the child that plays is given (pickled)."""

    env: dict[str, Any]
    teams: dict[str, str]
    """Per team: ``"random"`` or the local checkpoint file's path."""
    episodes: int
    seed: int
    replay_to: str


def replay_key(match_id: str) -> str:
    """Where a match's replay GIF is kept in the artifact store."""
    return f"matches/{match_id}/replay.gif"


def play(
    match_id: str,
    session_factory: sessionmaker[Session],
    storage: ArtifactStore,
    limits: RunLimits,
    worker_id: str,
    shutdown_requested: Callable[[], bool] = lambda: False,
) -> Outcome:
    """Play the match if it is queued; record how it ended."""
    match = retry_transient(lambda: _claim(session_factory, match_id, worker_id), "claiming")
    if match is None:
        return Outcome.DONE
    folder = storage.cache_dir / "matches" / match_id
    try:
        try:
            job = _job(match, session_factory, storage, folder)
        except (StoreError, LookupError) as exc:
            _end(session_factory, match_id, M.FAILED, str(exc))
            return Outcome.DONE
        result = supervise(
            play_in_child,
            job,
            limits.guards(),
            cancel_requested=lambda: False,
            shutdown_requested=shutdown_requested,
            still_held=lambda: _still_playing(session_factory, match_id),
            name=f"match-{match_id}",
        )
        if result.ending == Ending.LOST:
            log.info("match %s was cancelled while it played; stopped", match_id)
            return Outcome.DONE
        if result.ending == Ending.RETURNED and result.value is not None:
            return _record(session_factory, storage, match_id, result.value, Path(job.replay_to))
        if shutdown_requested():
            _end(session_factory, match_id, M.QUEUED, "requeued: its worker shut down", M.RUNNING)
            return Outcome.REQUEUE
        reason = {
            Ending.RAISED: f"the match failed: {result.detail}",
            Ending.OVER_MEMORY: f"the match used {result.memory_mb:,.0f} MiB, more than the "
            f"{limits.memory_mb:,} MiB a run may (MARLFORGE_RUN_MEMORY_MB)",
        }.get(result.ending, f"the match's process ended ({result.ending}): {result.detail}")
        _end(session_factory, match_id, M.FAILED, reason)
        return Outcome.DONE
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def play_in_child(job: MatchJob, stop_requested: Callable[[], bool]) -> dict[str, Any]:
    """In the match's own process: play it and return the result as JSON."""
    from learners.api import RANDOM as RANDOM_POLICY
    from learners.api import play_match

    limit_threads(get_settings().worker_threads)
    teams: dict[str, Any] = {
        team: RANDOM_POLICY if source == RANDOM else Path(source)
        for team, source in job.teams.items()
    }
    result = play_match(
        env_spec(job.env),
        teams,
        episodes=job.episodes,
        seed=job.seed,
        replay_to=Path(job.replay_to),
    )
    played: dict[str, Any] = result.as_json()
    return played


def _still_playing(session_factory: sessionmaker[Session], match_id: str) -> bool:
    """False once the match is no longer ``running`` (its project cancelled it): the supervisor
    then stops its process. A database that does not answer is not a cancel."""
    try:
        with session_factory() as session:
            return MatchRepository(session).status_of(match_id) == M.RUNNING
    except SQLAlchemyError:
        return True


def _claim(session_factory: sessionmaker[Session], match_id: str, worker_id: str) -> Match | None:
    with session_factory() as session:
        matches = MatchRepository(session)
        if not matches.move(match_id, M.QUEUED, M.RUNNING, worker_id=worker_id):
            session.rollback()
            log.info("match %s is not queued; nothing to play", match_id)
            return None
        session.commit()
        match = matches.get(match_id)
        assert match is not None
        session.expunge(match)
        return match


def _job(
    match: Match, session_factory: sessionmaker[Session], storage: ArtifactStore, folder: Path
) -> MatchJob:
    """Each team's checkpoint copied here and checked against the sha256 chosen at submission."""
    folder.mkdir(parents=True, exist_ok=True)
    teams: dict[str, str] = {}
    for team, choice in match.teams.items():
        if choice == RANDOM:
            teams[team] = RANDOM
            continue
        row = _checkpoint(session_factory, choice)
        if row is None:
            raise LookupError(
                f"the {team} team's checkpoint {choice['checkpoint_id']} of experiment "
                f"{choice['experiment_id']} no longer exists (pruned by its run's keep_last)"
            )
        local = folder / f"{team}.ckpt"
        try:
            verified_copy(storage, row.path, choice["sha256"], local)
        except StoreError as exc:
            raise StoreError(
                f"the {team} team's checkpoint could not be fetched from "
                f"{storage.locate(row.path)}: {exc}"
            ) from exc
        teams[team] = str(local)
    return MatchJob(match.env, teams, match.episodes, match.seed, str(folder / "replay.gif"))


def _checkpoint(
    session_factory: sessionmaker[Session], choice: dict[str, Any]
) -> Checkpoint | None:
    with session_factory() as session:
        row = session.get(Checkpoint, choice["checkpoint_id"])
        if row is None or row.experiment_id != choice["experiment_id"]:
            return None
        session.expunge(row)
        return row


def _record(
    session_factory: sessionmaker[Session],
    storage: ArtifactStore,
    match_id: str,
    result: dict[str, Any],
    replay: Path,
) -> Outcome:
    key: str | None = None
    if replay.is_file():
        try:
            key = storage.put(replay_key(match_id), lambda path: _copy(replay, path)).key
        except OSError as exc:  # the result stands without its replay
            log.warning("match %s: the replay could not be stored: %s", match_id, exc)
    _end(session_factory, match_id, M.SUCCEEDED, None, result=result, replay_path=key)
    return Outcome.DONE


def _end(
    session_factory: sessionmaker[Session],
    match_id: str,
    to: MatchStatus,
    reason: str | None,
    expected: MatchStatus = M.RUNNING,
    **values: Any,
) -> None:
    def write() -> None:
        with session_factory() as session:
            MatchRepository(session).move(match_id, expected, to, reason=reason, **values)
            session.commit()

    if reason is not None:
        log.warning("match %s: %s", match_id, reason)
    retry_transient(write, "recording the match's end")


def _copy(source: Path, dest: Path) -> None:
    shutil.copyfile(source, dest)
