"""The worker's TrainingHooks, driven by a small in-test caller (no training)."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from core.enums import EventKind, ExperimentStatus
from core.experiments import service as experiments
from core.experiments.checkpoints import CheckpointRepository
from core.lifecycle import transition
from core.models import Checkpoint, Experiment, ExperimentEvent, MetricPointRow
from core.storage import ArtifactStore, FilesystemStore
from core.storage.s3 import S3Store
from learners.hooks import MetricPoint
from tests.s3_support import MotoServer, free_port
from workers.runs.checkpoints import ArtifactWriteError
from workers.runs.hooks import DatabaseHooks, StopCause
from workers.runs.resume import prepare_resume

pytestmark = pytest.mark.integration


def _hooks(
    experiment_id: str,
    session_factory: sessionmaker[Session],
    storage: ArtifactStore,
    **overrides: object,
) -> DatabaseHooks:
    options: dict[str, object] = {
        "keep_last": 2,
        "total_steps": 1000,
        "poll_interval_s": 0.05,
        "time_limit_s": 600.0,
    }
    options.update(overrides)
    return DatabaseHooks(experiment_id, session_factory, storage, **options)  # type: ignore[arg-type]


def _running(session_factory: sessionmaker[Session], experiment_id: str) -> None:
    with session_factory() as session:
        transition(
            session, experiment_id, [ExperimentStatus.QUEUED], ExperimentStatus.RUNNING, None
        )
        session.commit()


def _events(session: Session, experiment_id: str, kind: EventKind) -> list[ExperimentEvent]:
    return list(
        session.scalars(
            select(ExperimentEvent)
            .where(ExperimentEvent.experiment_id == experiment_id, ExperimentEvent.kind == kind)
            .order_by(ExperimentEvent.id)
        )
    )


def test_metrics_are_written_in_batches_not_per_scalar(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    storage: FilesystemStore,
) -> None:
    experiment_id = submit(tiny_spec())
    _running(session_factory, experiment_id)
    hooks = _hooks(experiment_id, session_factory, storage, poll_interval_s=3600.0)

    for step in range(1, 101):
        hooks.metrics(
            [MetricPoint(step, 1.0, "loss", 1.0 / step), MetricPoint(step, 1.0, "q", float("nan"))]
        )
        hooks.progress(step)
    hooks.flush()

    with session_factory() as session:
        rows = session.scalars(
            select(MetricPointRow).where(MetricPointRow.experiment_id == experiment_id)
        ).all()
        assert len(rows) == 200
        # The first call flushed at once (nothing written yet), the other 199 calls in one batch.
        assert len(_events(session, experiment_id, EventKind.METRICS)) == 2
        experiment = session.get(Experiment, experiment_id)
        assert experiment is not None and experiment.step == 100
        assert experiment.latest_metrics == {
            "loss": {"step": 100, "value": 0.01},
            "q": {"step": 100, "value": None},
        }


def test_a_checkpoint_is_stored_atomically_hashed_and_pruned(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    storage: FilesystemStore,
) -> None:
    experiment_id = submit(tiny_spec())
    _running(session_factory, experiment_id)
    hooks = _hooks(experiment_id, session_factory, storage, keep_last=2)
    written: dict[int, bytes] = {}

    for step in (100, 200, 300, 300):
        data = f"state at {step} written {len(written)}".encode()
        written[step] = data
        hooks.checkpoint(step, lambda path, data=data: path.write_bytes(data))

    with session_factory() as session:
        rows = session.scalars(
            select(Checkpoint)
            .where(Checkpoint.experiment_id == experiment_id)
            .order_by(Checkpoint.step)
        ).all()
        assert [r.step for r in rows] == [200, 300]
        for row in rows:
            path = storage.resolve(row.path)
            assert path.read_bytes() == written[row.step]
            assert row.sha256 == hashlib.sha256(written[row.step]).hexdigest()
            assert row.size_bytes == len(written[row.step])
        assert len(_events(session, experiment_id, EventKind.CHECKPOINT)) == 4
    files = sorted(p.name for p in storage.checkpoint_dir(experiment_id).iterdir())
    assert files == ["step-000000000200.ckpt", "step-000000000300.ckpt"]


def test_a_failing_checkpoint_writer_leaves_no_file_and_no_record(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    storage: FilesystemStore,
) -> None:
    experiment_id = submit(tiny_spec())
    _running(session_factory, experiment_id)
    hooks = _hooks(experiment_id, session_factory, storage)

    def broken(path: Path) -> None:
        path.write_bytes(b"half a checkpoint")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        hooks.checkpoint(100, broken)

    assert list(storage.checkpoint_dir(experiment_id).iterdir()) == []
    with session_factory() as session:
        assert (
            session.scalars(
                select(Checkpoint).where(Checkpoint.experiment_id == experiment_id)
            ).all()
            == []
        )


def test_should_stop_sees_a_cancel_within_the_poll_interval(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    storage: FilesystemStore,
) -> None:
    experiment_id = submit(tiny_spec())
    _running(session_factory, experiment_id)
    hooks = _hooks(experiment_id, session_factory, storage, poll_interval_s=0.05)
    assert hooks.should_stop() is False

    with session_factory() as session:
        assert experiments.cancel(session, experiment_id).status == ExperimentStatus.CANCELLING
    deadline = time.monotonic() + 5
    while not hooks.should_stop() and time.monotonic() < deadline:
        time.sleep(0.01)

    assert hooks.stop_cause == StopCause.CANCELLED


def test_should_stop_on_worker_shutdown_and_on_the_time_limit(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    storage: FilesystemStore,
) -> None:
    experiment_id = submit(tiny_spec())
    _running(session_factory, experiment_id)
    shutting_down = False
    hooks = _hooks(
        experiment_id, session_factory, storage, shutdown_requested=lambda: shutting_down
    )
    expired = _hooks(experiment_id, session_factory, storage, time_limit_s=0.0)

    assert hooks.should_stop() is False
    shutting_down = True
    time.sleep(0.001)

    assert hooks.should_stop() is True and hooks.stop_cause == StopCause.SHUTDOWN
    assert expired.should_stop() is True and expired.stop_cause == StopCause.TIME_LIMIT


def test_log_lines_become_events(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    storage: FilesystemStore,
) -> None:
    experiment_id = submit(tiny_spec())
    _running(session_factory, experiment_id)
    hooks = _hooks(experiment_id, session_factory, storage)

    hooks.progress(40)
    hooks.log("warning", "replay buffer is small")
    hooks.flush()

    with session_factory() as session:
        payloads = [e.payload for e in _events(session, experiment_id, EventKind.LOG)]
    assert payloads == [{"level": "warning", "message": "replay buffer is small", "step": 40}]


def test_a_checkpoint_upload_waits_out_a_store_that_comes_back(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    tmp_path: Path,
    aws_env: None,
) -> None:
    # The store is away when the checkpoint is written (nothing listens on its port) and comes
    # back two seconds later, empty: its bucket appears a moment after it starts listening.
    server = MotoServer(tmp_path)
    bucket = "marlforge-returning"
    store = S3Store(f"s3://{bucket}/runs", endpoint_url=server.endpoint, cache_dir=tmp_path / "c")
    experiment_id = submit(tiny_spec())
    _running(session_factory, experiment_id)
    hooks = _hooks(experiment_id, session_factory, store, upload_retry_s=60.0)

    def come_back() -> None:
        time.sleep(2.0)
        server.start()
        server.client().create_bucket(Bucket=bucket)

    returning = threading.Thread(target=come_back)
    returning.start()
    try:
        started = time.monotonic()
        hooks.checkpoint(100, lambda path: path.write_bytes(b"weights at 100"))
        waited = time.monotonic() - started
        returning.join()

        with session_factory() as session:
            rows = session.scalars(
                select(Checkpoint).where(Checkpoint.experiment_id == experiment_id)
            ).all()
            warnings = [
                e.payload["message"] for e in _events(session, experiment_id, EventKind.LOG)
            ]
        assert [(r.step, r.sha256) for r in rows] == [
            (100, hashlib.sha256(b"weights at 100").hexdigest())
        ]
        assert b"".join(store.read(rows[0].path)) == b"weights at 100"
        assert waited >= 2.0
        assert warnings and all("trying again in" in w for w in warnings)
        assert warnings[0].startswith(f"checkpoint upload to s3://{bucket}/runs/experiments/")
    finally:
        returning.join()
        server.stop()


def test_a_checkpoint_upload_to_a_store_that_stays_away_fails_after_the_window(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    tmp_path: Path,
    aws_env: None,
) -> None:
    store = S3Store(
        "s3://gone/runs", endpoint_url=f"http://127.0.0.1:{free_port()}", cache_dir=tmp_path / "c"
    )
    experiment_id = submit(tiny_spec())
    _running(session_factory, experiment_id)
    hooks = _hooks(experiment_id, session_factory, store, upload_retry_s=3.0)

    started = time.monotonic()
    with pytest.raises(ArtifactWriteError, match=r"checkpoint upload to s3://gone/runs/.* failed"):
        hooks.checkpoint(100, lambda path: path.write_bytes(b"weights"))

    assert 3.0 <= time.monotonic() - started < 30
    with session_factory() as session:
        assert (
            session.scalars(
                select(Checkpoint).where(Checkpoint.experiment_id == experiment_id)
            ).all()
            == []
        )


def _eval_then_checkpoint(hooks: DatabaseHooks, step: int, eval_return: float | None) -> None:
    """What the runner does at a step where both are due: report the evaluation, then save."""
    if eval_return is not None:
        hooks.metrics([MetricPoint(step, 1.0, "eval/episode_return", eval_return)])
    data = f"state at {step}".encode()
    hooks.checkpoint(step, lambda path: path.write_bytes(data))


def _kept(session_factory: sessionmaker[Session], experiment_id: str) -> list[tuple[int, Any]]:
    with session_factory() as session:
        rows = session.scalars(
            select(Checkpoint)
            .where(Checkpoint.experiment_id == experiment_id)
            .order_by(Checkpoint.step)
        ).all()
        return [(r.step, r.eval_return) for r in rows]


@pytest.mark.parametrize("keep_best", [True, False])
def test_the_best_checkpoint_is_kept_beside_the_newest(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    storage: FilesystemStore,
    keep_best: bool,
) -> None:
    experiment_id = submit(tiny_spec())
    _running(session_factory, experiment_id)
    hooks = _hooks(experiment_id, session_factory, storage, keep_last=1, keep_best=keep_best)

    # A return at another step than the checkpoint's is not the checkpoint's.
    hooks.metrics([MetricPoint(50, 1.0, "eval/episode_return", 99.0)])
    for step, value in [(100, -50.0), (200, -80.0), (300, float("nan")), (350, None)]:
        _eval_then_checkpoint(hooks, step, value)

    if keep_best:
        assert _kept(session_factory, experiment_id) == [(100, -50.0), (350, None)]
    else:
        assert _kept(session_factory, experiment_id) == [(350, None)]
    files = sorted(p.name for p in storage.checkpoint_dir(experiment_id).iterdir())
    assert len(files) == (2 if keep_best else 1)
    with session_factory() as session:
        last = _events(session, experiment_id, EventKind.CHECKPOINT)[-1].payload
    assert last["eval_return"] is None
    assert (last["best_id"] is not None) == keep_best


def test_the_best_survives_a_resume_and_is_replaced_only_by_a_better_one(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    storage: FilesystemStore,
    tmp_path: Path,
) -> None:
    """keep_last=1 and an early best: after a takeover's resume (which forgets what follows the
    latest checkpoint) the run goes on, and the early best is still recorded and stored."""
    experiment_id = submit(tiny_spec())
    _running(session_factory, experiment_id)
    first = _hooks(experiment_id, session_factory, storage, keep_last=1)
    for step, value in [(100, -20.0), (200, -60.0), (300, -70.0)]:
        _eval_then_checkpoint(first, step, value)

    second = _hooks(experiment_id, session_factory, storage, keep_last=1)
    copy = prepare_resume(experiment_id, session_factory, storage, second, tmp_path / "c.ckpt")
    assert copy is not None and copy.read_bytes() == b"state at 300"
    for step, value in [(400, -30.0), (500, -90.0)]:
        _eval_then_checkpoint(second, step, value)

    assert _kept(session_factory, experiment_id) == [(100, -20.0), (500, -90.0)]
    with session_factory() as session:
        best = CheckpointRepository(session).best(experiment_id)
    assert best is not None and storage.resolve(best.path).read_bytes() == b"state at 100"

    _eval_then_checkpoint(second, 600, -5.0)

    assert _kept(session_factory, experiment_id) == [(600, -5.0)]
    files = sorted(p.name for p in storage.checkpoint_dir(experiment_id).iterdir())
    assert files == ["step-000000000600.ckpt"]
