"""Leases and takeover on PostgreSQL (each test rolled back): renewal, lapse, the reasons people
read, the restart cap, lost cancels, two reapers racing, and a lease that lapsed in a database
outage. Time passes by handing ``reap`` a later ``now``; the database does everything else."""

from __future__ import annotations

import datetime as dt
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from core.db import make_engine, make_session_factory, utcnow
from core.dispatch.queue import CeleryDispatcher
from core.enums import EventKind, ExperimentStatus
from core.experiments import service as experiments
from core.experiments.checkpoints import CheckpointRepository
from core.leases import service as leases
from core.lifecycle import transition
from core.models import Experiment, ExperimentEvent, StatusTransition
from core.settings import Settings
from learners.admission.parse import parse_spec
from tests.auth_support import default_project_id
from tests.broker_support import queued_messages as broker_messages
from tests.conftest import migrated_database
from tests.db_outage_support import Outage

S = ExperimentStatus
TTL = 60.0
pytestmark = pytest.mark.integration


@pytest.fixture
def session(rollback_sessions: sessionmaker[Session]) -> Iterator[Session]:
    with rollback_sessions() as s:
        yield s


@pytest.fixture
def settings(tmp_path: Path, pg_url: str) -> Settings:
    return Settings(
        var_dir=tmp_path, database_url=pg_url, broker_url="filesystem://", queue_prefix="lease."
    )


@pytest.fixture
def dispatcher(settings: Settings) -> CeleryDispatcher:
    return CeleryDispatcher(settings)


def queued_messages(settings: Settings, experiment_id: str) -> int:
    """Messages for the experiment waiting in the embedded broker."""
    return sum(m["args"] == [experiment_id] for m in broker_messages(settings))


@pytest.fixture
def start(
    session: Session, dispatcher: CeleryDispatcher, tiny_spec: Callable[..., dict[str, Any]]
) -> Callable[..., str]:
    """Submit a run and claim it for a worker, as a worker's claim does."""

    def run(worker: str = "w-3", step: int = 32_000, **changes: Any) -> str:
        spec = parse_spec(tiny_spec(**changes))
        experiment_id = experiments.submit(
            session, dispatcher, spec, default_project_id(session)
        ).id
        moved = transition(
            session, experiment_id, [S.QUEUED], S.RUNNING, None, step=step,
            **leases.hold(worker, TTL),
        )  # fmt: skip
        assert moved == S.QUEUED
        session.commit()
        return experiment_id

    return run


def later(seconds: float) -> dt.datetime:
    return utcnow() + dt.timedelta(seconds=seconds)


def reaped(takeovers: list[leases.Takeover], experiment_id: str) -> list[leases.Takeover]:
    return [t for t in takeovers if t.experiment_id == experiment_id]


def test_a_run_whose_lease_lapsed_is_queued_again_from_its_checkpoint_with_a_reason(
    session: Session,
    rollback_sessions: sessionmaker[Session],
    dispatcher: CeleryDispatcher,
    settings: Settings,
    start: Callable[..., str],
) -> None:
    experiment_id = start()
    CheckpointRepository(session).record(experiment_id, 30_000, "x/30000.ckpt", 10, "0" * 64)
    session.commit()
    waiting = queued_messages(settings, experiment_id)

    assert (
        reaped(leases.reap(rollback_sessions, dispatcher, TTL, now=later(TTL / 2)), experiment_id)
        == []
    )
    done = reaped(
        leases.reap(rollback_sessions, dispatcher, TTL, now=later(TTL + 1)), experiment_id
    )

    reason = (
        "worker w-3 lost at step 32,000; "
        "restarting from the checkpoint at step 30,000 (restart 1 of 3)"
    )
    assert done == [leases.Takeover(experiment_id, S.QUEUED, reason)]
    run = experiments.get(session, experiment_id)
    assert (run.status, run.status_reason, run.restarts) == (S.QUEUED, reason, 1)
    assert run.lease_expires_at is None and run.worker_id == "w-3"
    # Dispatched again, not left to the broker's redelivery.
    assert queued_messages(settings, experiment_id) == waiting + 1
    last = session.scalars(
        select(StatusTransition)
        .where(StatusTransition.experiment_id == experiment_id)
        .order_by(StatusTransition.id.desc())
    ).first()
    assert last is not None and (last.from_status, last.to_status, last.reason) == (
        S.RUNNING, S.QUEUED, reason,
    )  # fmt: skip
    logged = session.scalars(
        select(ExperimentEvent).where(
            ExperimentEvent.experiment_id == experiment_id, ExperimentEvent.kind == EventKind.LOG
        )
    ).all()
    assert [e.payload["message"] for e in logged] == [reason]


def test_renewal_keeps_the_run_and_only_its_holder_can_renew(
    session: Session,
    rollback_sessions: sessionmaker[Session],
    dispatcher: CeleryDispatcher,
    start: Callable[..., str],
) -> None:
    experiment_id = start(worker="w-1")
    before = experiments.get(session, experiment_id).lease_expires_at
    assert before is not None

    assert leases.renew(rollback_sessions, experiment_id, "w-2", TTL) == leases.Hold.TAKEN
    assert leases.renew(rollback_sessions, experiment_id, "w-1", 2 * TTL) == leases.Hold.HELD
    after = experiments.get(session, experiment_id).lease_expires_at
    assert after is not None and after > before

    # Past the first lease but inside the renewed one: nothing to take over.
    assert (
        reaped(leases.reap(rollback_sessions, dispatcher, TTL, now=later(TTL + 1)), experiment_id)
        == []
    )
    assert experiments.get(session, experiment_id).status == S.RUNNING


def test_a_renewal_tells_a_run_that_left_running_from_one_another_worker_holds(
    session: Session, rollback_sessions: sessionmaker[Session], start: Callable[..., str]
) -> None:
    experiment_id = start(worker="w-1")
    # The run's own process returns it to the queue on a shutdown, which ends the lease: nobody
    # holds it, and its worker must wait for the process's report, not treat it as taken.
    transition(
        session, experiment_id, [S.RUNNING], S.QUEUED, "the worker shut down",
        **leases.RELEASED,
    )  # fmt: skip
    session.commit()
    assert leases.renew(rollback_sessions, experiment_id, "w-1", TTL) == leases.Hold.RELEASED
    assert experiments.get(session, experiment_id).lease_expires_at is None

    transition(
        session, experiment_id, [S.QUEUED], S.RUNNING, None, **leases.hold("w-2", TTL)
    )  # fmt: skip
    session.commit()
    assert leases.renew(rollback_sessions, experiment_id, "w-1", TTL) == leases.Hold.TAKEN
    assert leases.renew(rollback_sessions, "no-such-run", "w-1", TTL) == leases.Hold.RELEASED


def test_after_max_restarts_a_lost_run_fails_and_zero_disables_restarts(
    session: Session,
    rollback_sessions: sessionmaker[Session],
    dispatcher: CeleryDispatcher,
    start: Callable[..., str],
) -> None:
    capped = start(max_restarts=1)
    never = start(max_restarts=0, step=500)
    reaped_now = leases.reap(rollback_sessions, dispatcher, TTL, now=later(TTL + 1))
    assert [t.to for t in reaped(reaped_now, capped)] == [S.QUEUED]
    assert [t.to for t in reaped(reaped_now, never)] == [S.FAILED]
    assert experiments.get(session, never).status_reason == (
        "worker w-3 lost at step 500; not restarted: restarts are off for this run "
        "(max_restarts 0); resume it to continue from the start (no checkpoint was saved)"
    )

    # The restarted run is claimed again by another worker, which is lost too.
    transition(
        session, capped, [S.QUEUED], S.RUNNING, None, **leases.hold("w-9", TTL)
    )  # fmt: skip
    session.commit()
    again = reaped(leases.reap(rollback_sessions, dispatcher, TTL, now=later(TTL + 1)), capped)
    assert [t.to for t in again] == [S.FAILED]
    run = experiments.get(session, capped)
    assert run.status == S.FAILED and run.finished_at is not None
    assert run.status_reason is not None and run.status_reason.startswith(
        "worker w-9 lost at step 32,000; not restarted: it was restarted 1 of 1 times already"
    )
    # A failed run is resumable by hand, as any other.
    assert experiments.resume(session, dispatcher, capped).status == S.QUEUED


def test_a_cancel_of_a_run_whose_worker_is_lost_ends_cancelled_once_the_lease_lapses(
    session: Session,
    rollback_sessions: sessionmaker[Session],
    dispatcher: CeleryDispatcher,
    start: Callable[..., str],
) -> None:
    experiment_id = start()
    assert experiments.cancel(session, experiment_id).status == S.CANCELLING

    done = reaped(
        leases.reap(rollback_sessions, dispatcher, TTL, now=later(TTL + 1)), experiment_id
    )

    assert [t.to for t in done] == [S.CANCELLED]
    run = experiments.get(session, experiment_id)
    assert run.status == S.CANCELLED and run.restarts == 0
    assert (
        run.status_reason
        == "worker w-3 lost at step 32,000 while the run was being cancelled; cancelled"
    )


def test_two_reapers_take_a_run_over_once(
    rollback_sessions: sessionmaker[Session],
    dispatcher: CeleryDispatcher,
    settings: Settings,
    start: Callable[..., str],
) -> None:
    experiment_id = start()
    waiting = queued_messages(settings, experiment_id)
    first = leases.reap(rollback_sessions, dispatcher, TTL, now=later(TTL + 1))
    second = leases.reap(rollback_sessions, dispatcher, TTL, now=later(TTL + 2))
    assert len(reaped(first, experiment_id)) == 1 and reaped(second, experiment_id) == []
    assert queued_messages(settings, experiment_id) == waiting + 1


def test_a_dead_workers_runs_are_released_at_once_and_no_one_elses(
    session: Session,
    rollback_sessions: sessionmaker[Session],
    dispatcher: CeleryDispatcher,
    start: Callable[..., str],
) -> None:
    dead = start(worker="up-w1")
    alive = start(worker="up-w2")
    legacy = start(worker="old")  # started before leases existed: no lease to read
    transition(session, legacy, [S.RUNNING], S.RUNNING, None, lease_expires_at=None)
    session.commit()

    done = leases.release_worker(rollback_sessions, dispatcher, "up-w1")

    assert [t.experiment_id for t in done] == [dead]
    assert experiments.get(session, dead).status == S.QUEUED
    assert experiments.get(session, alive).status == S.RUNNING
    assert experiments.get(session, legacy).status == S.RUNNING


def test_a_run_started_before_leases_existed_is_reaped_only_once_it_is_silent(
    session: Session,
    rollback_sessions: sessionmaker[Session],
    dispatcher: CeleryDispatcher,
    start: Callable[..., str],
) -> None:
    experiment_id = start()
    transition(session, experiment_id, [S.RUNNING], S.RUNNING, None, lease_expires_at=None)
    session.commit()
    assert (
        reaped(leases.reap(rollback_sessions, dispatcher, TTL, now=later(1)), experiment_id) == []
    )
    done = reaped(
        leases.reap(rollback_sessions, dispatcher, TTL, now=later(TTL + 1)), experiment_id
    )
    assert [t.to for t in done] == [S.QUEUED]


def test_queue_position_counts_the_runs_of_the_same_backend_queued_before(
    session: Session, dispatcher: CeleryDispatcher, tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    project = default_project_id(session)
    first, second = (
        experiments.submit(session, dispatcher, parse_spec(tiny_spec()), project) for _ in range(2)
    )
    other_backend = experiments.submit(
        session, dispatcher, parse_spec(tiny_spec(backend="tensorflow")), project
    )
    ahead = experiments.queue_position(session, first)
    assert ahead is not None
    assert experiments.queue_position(session, second) == ahead + 1
    assert experiments.queue_position(session, other_backend) is not None
    experiments.cancel(session, first.id)
    assert experiments.queue_position(session, experiments.get(session, second.id)) == ahead
    assert experiments.queue_position(session, experiments.get(session, first.id)) is None


def test_a_cuda_run_whose_lease_lapsed_goes_back_to_its_gpu_queue(
    rollback_sessions: sessionmaker[Session],
    dispatcher: CeleryDispatcher,
    settings: Settings,
    start: Callable[..., str],
) -> None:
    experiment_id = start(device="cuda")

    done = reaped(
        leases.reap(rollback_sessions, dispatcher, TTL, now=later(TTL + 1)), experiment_id
    )

    assert [t.to for t in done] == [S.QUEUED]
    queues = [m["queue"] for m in broker_messages(settings) if m["args"] == [experiment_id]]
    # Its submission's message, and the takeover's: both on the GPU queue, never the plain one.
    assert queues == ["lease.torch-gpu.gymnasium"] * 2


def test_a_worker_started_again_is_never_named_as_the_one_it_replaces() -> None:
    # Containers on the host's network share its hostname, and a container restarted by its
    # engine runs its worker under the same small pid: the name carries a part drawn at start.
    ours = leases.default_worker_id()
    code = "from core.leases.service import default_worker_id; print(default_worker_id())"
    started = [
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
        for _ in range(2)
    ]

    assert ours == leases.default_worker_id()  # one name for the whole life of a process
    assert ours.startswith(f"{socket.gethostname()}-{os.getpid()}-")
    tokens = [name.rsplit("-", 1)[1] for name in [ours, *started]]
    assert all(len(t) == 6 and int(t, 16) >= 0 for t in tokens)
    assert len(set(tokens)) == 3


def test_a_lease_that_lapsed_while_the_database_was_away_spends_no_restart(
    tiny_spec: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    """A real outage of the run's database (it refuses every connection): the lease lapses
    meanwhile, the reaper's pass fails, and its first pass after names the outage and keeps the
    run's restarts; a lease that lapses later, the database up, is a lost worker again."""
    ttl = 2.0
    with migrated_database("marlforge_reaper") as url:
        engine = make_engine(url)
        sessions = make_session_factory(engine)
        settings = Settings(
            var_dir=tmp_path, database_url=url, broker_url="filesystem://", queue_prefix="out."
        )
        dispatcher = CeleryDispatcher(settings)

        def held(worker: str) -> str:
            with sessions() as session:
                spec = parse_spec(tiny_spec())
                run = experiments.submit(session, dispatcher, spec, default_project_id(session)).id
                transition(
                    session, run, [S.QUEUED], S.RUNNING, None, step=1200, **leases.hold(worker, ttl)
                )  # fmt: skip
                session.commit()
            return run

        def row(run: str) -> Any:
            with sessions() as session:
                return session.get(Experiment, run)

        away = held("w-7")
        reaper = leases.Reaper(sessions, dispatcher, ttl, interval_s=1.0)
        reaper.work()
        assert row(away).status == S.RUNNING
        outage = Outage(url)
        outage.start()
        try:
            time.sleep(ttl + 1)
            with pytest.raises(SQLAlchemyError):
                reaper.work()
        finally:
            outage.end()
        reaper.work()
        moved = row(away)
        assert (moved.status, moved.restarts) == (S.QUEUED, 0)
        assert moved.status_reason.startswith("the database could not be reached between ")
        assert moved.status_reason.endswith(
            "UTC; the lease of worker w-7 lapsed meanwhile at step 1,200; restarting from the "
            "start (no checkpoint was saved) (an outage spends no restart)"
        )

        time.sleep(2 * ttl + 0.5)  # the outage is behind: a lapse now is a lost worker
        lost = held("w-8")
        time.sleep(ttl + 0.5)
        reaper.work()
        moved = row(lost)
        assert (moved.status, moved.restarts) == (S.QUEUED, 1)
        assert moved.status_reason.startswith("worker w-8 lost at step 1,200; restarting")
        engine.dispose()
