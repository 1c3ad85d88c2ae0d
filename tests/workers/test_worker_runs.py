"""``run_experiment`` end to end in this process, with the real learner and a tiny budget."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from core import experiments
from core.enums import ExperimentStatus
from core.lifecycle import transition
from core.models import Checkpoint, Experiment, MetricPointRow, StatusTransition
from core.storage import ArtifactStorage
from workers.orchestration import Outcome, RunLimits, run_experiment

S = ExperimentStatus
pytestmark = [pytest.mark.slow, pytest.mark.integration]


def _experiment(session_factory: sessionmaker[Session], experiment_id: str) -> Experiment:
    with session_factory() as session:
        row = session.get(Experiment, experiment_id)
        assert row is not None
        return row


def _timeline(session_factory: sessionmaker[Session], experiment_id: str) -> list[tuple[Any, Any]]:
    with session_factory() as session:
        rows = session.scalars(
            select(StatusTransition)
            .where(StatusTransition.experiment_id == experiment_id)
            .order_by(StatusTransition.id)
        ).all()
        return [(r.from_status, r.to_status) for r in rows]


def _metric_keys(
    session_factory: sessionmaker[Session], experiment_id: str
) -> list[tuple[int, str]]:
    with session_factory() as session:
        rows = session.scalars(
            select(MetricPointRow)
            .where(MetricPointRow.experiment_id == experiment_id)
            .order_by(MetricPointRow.step, MetricPointRow.name)
        ).all()
        return [(r.step, r.name) for r in rows]


def _checkpoint_steps(session_factory: sessionmaker[Session], experiment_id: str) -> list[int]:
    with session_factory() as session:
        return list(
            session.scalars(
                select(Checkpoint.step)
                .where(Checkpoint.experiment_id == experiment_id)
                .order_by(Checkpoint.step)
            )
        )


def _in_thread(target: Callable[[], Outcome]) -> tuple[threading.Thread, list[Outcome]]:
    result: list[Outcome] = []
    thread = threading.Thread(target=lambda: result.append(target()), daemon=True)
    thread.start()
    return thread, result


def _wait_for_step(session_factory: sessionmaker[Session], experiment_id: str, step: int) -> None:
    deadline = time.monotonic() + 120
    while _experiment(session_factory, experiment_id).step < step:
        assert time.monotonic() < deadline, "the run made no progress"
        time.sleep(0.05)


def test_a_run_succeeds_and_records_metrics_and_checkpoints(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    storage: ArtifactStorage,
    limits: RunLimits,
) -> None:
    experiment_id = submit(tiny_spec(total_steps=400))

    outcome = run_experiment(experiment_id, session_factory, storage, limits)

    assert outcome == Outcome.DONE
    row = _experiment(session_factory, experiment_id)
    assert row.status == S.SUCCEEDED, row.status_reason
    assert row.step == 400 and row.attempts == 1
    assert row.started_at is not None and row.finished_at is not None
    assert _timeline(session_factory, experiment_id) == [
        (None, S.QUEUED),
        (S.QUEUED, S.RUNNING),
        (S.RUNNING, S.SUCCEEDED),
    ]
    keys = _metric_keys(session_factory, experiment_id)
    assert keys and len(keys) == len(set(keys))
    assert "eval/episode_return" in row.latest_metrics
    assert _checkpoint_steps(session_factory, experiment_id) == [200, 400]


def test_a_cancelled_queued_experiment_never_starts(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    storage: ArtifactStorage,
    limits: RunLimits,
) -> None:
    experiment_id = submit(tiny_spec())
    with session_factory() as session:
        experiments.cancel(session, experiment_id)

    outcome = run_experiment(experiment_id, session_factory, storage, limits)

    assert outcome == Outcome.DONE
    row = _experiment(session_factory, experiment_id)
    assert row.status == S.CANCELLED and row.attempts == 0 and row.started_at is None
    assert _metric_keys(session_factory, experiment_id) == []


def test_cancelling_a_running_experiment_checkpoints_and_stops(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    storage: ArtifactStorage,
    limits: RunLimits,
) -> None:
    experiment_id = submit(tiny_spec(total_steps=100_000))
    thread, result = _in_thread(
        lambda: run_experiment(experiment_id, session_factory, storage, limits)
    )
    _wait_for_step(session_factory, experiment_id, 200)

    with session_factory() as session:
        assert experiments.cancel(session, experiment_id).status == S.CANCELLING
    thread.join(timeout=120)

    assert result == [Outcome.DONE]
    row = _experiment(session_factory, experiment_id)
    assert row.status == S.CANCELLED and row.status_reason == f"cancelled at step {row.step}"
    assert row.step < 100_000
    assert _checkpoint_steps(session_factory, experiment_id)[-1] == row.step
    assert _timeline(session_factory, experiment_id)[-2:] == [
        (S.RUNNING, S.CANCELLING),
        (S.CANCELLING, S.CANCELLED),
    ]


def test_a_worker_shutdown_requeues_and_the_next_run_resumes_on_the_same_steps(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    storage: ArtifactStorage,
    limits: RunLimits,
) -> None:
    experiment_id = submit(tiny_spec(total_steps=800))
    shutting_down = threading.Event()
    thread, result = _in_thread(
        lambda: run_experiment(
            experiment_id, session_factory, storage, limits, shutting_down.is_set
        )
    )
    _wait_for_step(session_factory, experiment_id, 200)
    shutting_down.set()
    thread.join(timeout=120)

    assert result == [Outcome.REQUEUE]
    interrupted = _experiment(session_factory, experiment_id)
    assert interrupted.status == S.QUEUED
    resumed_from = _checkpoint_steps(session_factory, experiment_id)[-1]
    assert resumed_from == interrupted.step < 800

    outcome = run_experiment(experiment_id, session_factory, storage, limits)

    assert outcome == Outcome.DONE
    row = _experiment(session_factory, experiment_id)
    assert row.status == S.SUCCEEDED and row.step == 800 and row.attempts == 2
    keys = _metric_keys(session_factory, experiment_id)
    assert len(keys) == len(set(keys))
    assert max(step for step, _ in keys) == 800


def test_a_run_that_raises_fails_with_the_message(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    storage: ArtifactStorage,
    limits: RunLimits,
) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU, so device=cuda would train")
    experiment_id = submit(tiny_spec(device="cuda"))

    outcome = run_experiment(experiment_id, session_factory, storage, limits)

    assert outcome == Outcome.DONE
    row = _experiment(session_factory, experiment_id)
    assert row.status == S.FAILED
    assert row.status_reason is not None and "cuda" in row.status_reason.lower()
    assert row.finished_at is not None


def test_a_job_for_a_live_running_experiment_is_dropped_but_a_stale_one_is_taken_over(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    storage: ArtifactStorage,
    limits: RunLimits,
) -> None:
    experiment_id = submit(tiny_spec(total_steps=200))
    with session_factory() as session:
        transition(session, experiment_id, [S.QUEUED], S.RUNNING, None, attempts=1)
        session.commit()

    assert run_experiment(experiment_id, session_factory, storage, limits) == Outcome.DONE
    assert _experiment(session_factory, experiment_id).attempts == 1  # left to its live worker

    with session_factory() as session:
        long_ago = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
        session.execute(
            update(Experiment).where(Experiment.id == experiment_id).values(updated_at=long_ago)
        )
        session.commit()
    run_experiment(experiment_id, session_factory, storage, limits)

    row = _experiment(session_factory, experiment_id)
    assert row.status == S.SUCCEEDED and row.attempts == 2


def test_an_unknown_experiment_id_is_dropped(
    session_factory: sessionmaker[Session], storage: ArtifactStorage, limits: RunLimits
) -> None:
    assert (
        run_experiment("01JAAAAAAAAAAAAAAAAAAAAAAA", session_factory, storage, limits)
        == Outcome.DONE
    )
