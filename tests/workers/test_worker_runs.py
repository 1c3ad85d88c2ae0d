"""``run_experiment`` end to end in this process, with the real learner and a tiny budget."""

from __future__ import annotations

import dataclasses
import datetime as dt
import secrets
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from core import auth
from core.db import make_engine, make_session_factory
from core.dispatch.queue import CeleryDispatcher
from core.enums import EventKind, ExperimentStatus
from core.experiments import service as experiments
from core.experiments.checkpoints import CheckpointRepository
from core.leases import service as leases
from core.lifecycle import transition
from core.metrics.repository import MetricRepository
from core.models import (
    Checkpoint,
    Experiment,
    ExperimentEvent,
    MetricPointRow,
    StatusTransition,
)
from core.settings import Settings
from core.storage import FilesystemStore, StoredObject
from learners.admission.parse import parse_spec
from tests.divergence_support import DIVERGING_PPO
from workers.outcome import Outcome, RunLimits
from workers.runs import job as run_job
from workers.runs.job import RunJob, run_experiment

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
    storage: FilesystemStore,
    limits: RunLimits,
) -> None:
    experiment_id = submit(tiny_spec(total_steps=400))

    outcome = run_experiment(experiment_id, session_factory, storage, limits)

    assert outcome == Outcome.DONE
    row = _experiment(session_factory, experiment_id)
    assert row.status == S.SUCCEEDED, row.status_reason
    assert row.step == 400 and row.attempts == 1
    assert row.started_at is not None and row.finished_at is not None
    # The spec's "auto" on this host without a GPU: the run record says what it ran on.
    assert row.device == "cpu"
    assert _timeline(session_factory, experiment_id) == [
        (None, S.QUEUED),
        (S.QUEUED, S.RUNNING),
        (S.RUNNING, S.SUCCEEDED),
    ]
    keys = _metric_keys(session_factory, experiment_id)
    assert keys and len(keys) == len(set(keys))
    assert "eval/episode_return" in row.latest_metrics
    assert _checkpoint_steps(session_factory, experiment_id) == [200, 400]
    # The runner evaluates before the checkpoint it takes at the same step: each has its return.
    with session_factory() as session:
        returns = {
            c.step: c.eval_return for c in CheckpointRepository(session).all_of(experiment_id)
        }
        evals = MetricRepository(session).page(experiment_id, ["eval/episode_return"], None, 10)[0]
    assert returns == {p.step: p.value for p in evals}


def test_a_cancelled_queued_experiment_never_starts(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    storage: FilesystemStore,
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
    storage: FilesystemStore,
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


class _HoldsFirstCheckpoint(FilesystemStore):
    """Artifact storage whose first checkpoint upload, in the run's own process, waits for the
    SIGTERM that a worker's shutdown sends: the run cannot train past that checkpoint before the
    shutdown reaches it, however loaded the machine (a marker file tells the test it is waiting)."""

    def __init__(self, root: Path, waiting: Path) -> None:
        super().__init__(root)
        self.waiting = waiting

    def put(self, key: str, write: Callable[[Path], None]) -> StoredObject:
        if not self.waiting.exists():
            arrived = threading.Event()
            forward = signal.getsignal(signal.SIGTERM)
            assert callable(forward)

            def on_term(signum: int, frame: FrameType | None) -> None:
                forward(signum, frame)
                arrived.set()

            signal.signal(signal.SIGTERM, on_term)
            self.waiting.touch()
            give_up = time.monotonic() + 120
            while not arrived.wait(0.05):
                if time.monotonic() > give_up:
                    raise TimeoutError("no SIGTERM within 120 s of the first checkpoint")
        return super().put(key, write)


def test_a_worker_shutdown_requeues_and_the_next_run_resumes_on_the_same_steps(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    storage: FilesystemStore,
    limits: RunLimits,
    tmp_path: Path,
) -> None:
    experiment_id = submit(tiny_spec(total_steps=800))
    waiting = tmp_path / "first-checkpoint-waiting"
    held = _HoldsFirstCheckpoint(storage.root, waiting)

    # The worker starts shutting down while the run's first checkpoint (step 200) waits for it.
    result = run_experiment(experiment_id, session_factory, held, limits, waiting.exists)

    assert result == Outcome.REQUEUE
    interrupted = _experiment(session_factory, experiment_id)
    assert interrupted.status == S.QUEUED
    resumed_from = _checkpoint_steps(session_factory, experiment_id)[-1]
    assert resumed_from == interrupted.step == 200

    outcome = run_experiment(experiment_id, session_factory, storage, limits)

    assert outcome == Outcome.DONE
    row = _experiment(session_factory, experiment_id)
    assert row.status == S.SUCCEEDED and row.step == 800 and row.attempts == 2
    keys = _metric_keys(session_factory, experiment_id)
    assert len(keys) == len(set(keys))
    assert max(step for step, _ in keys) == 800


def _requeue_then_report_late(job: RunJob, stop_requested: Callable[[], bool]) -> Outcome:
    """A run process (spawned) that returns its run to the queue, as a shutdown's does, then is
    slow to report it, as a loaded machine makes it: its worker polls the lease meanwhile."""
    engine = make_engine(job.database_url)
    try:
        with make_session_factory(engine)() as session:
            moved = transition(
                session, job.experiment_id, [S.RUNNING], S.QUEUED, "the worker shut down",
                condition=Experiment.worker_id == job.worker_id, **leases.RELEASED,
            )  # fmt: skip
            session.commit()
        assert moved is not None
    finally:
        engine.dispose()
    time.sleep(20 * job.limits.poll_interval_s)
    return Outcome.REQUEUE


def test_a_run_that_releases_its_lease_and_reports_late_is_not_taken_for_lost(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    storage: FilesystemStore,
    limits: RunLimits,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The race CI met: the run's process recorded its return to the queue (which ends the lease)
    # and its worker, renewing in between, read the ended lease as the run taken over, killed the
    # process and acknowledged the message: a queued run with no message left to start it.
    experiment_id = submit(tiny_spec())
    monkeypatch.setattr(run_job, "train_claimed", _requeue_then_report_late)

    outcome = run_experiment(experiment_id, session_factory, storage, limits)

    assert outcome == Outcome.REQUEUE
    assert _experiment(session_factory, experiment_id).status == S.QUEUED


def test_a_run_that_raises_fails_with_the_message(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    storage: FilesystemStore,
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
    assert row.device is None  # it never ran on anything


def test_a_run_whose_loss_becomes_nan_fails_and_keeps_what_it_reported(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    storage: FilesystemStore,
    limits: RunLimits,
) -> None:
    # PPO at step size 1 with a large entropy bonus and no clipping: the policy's std overflows
    # and the tenth update's loss is NaN (tests/divergence_support.py).
    diverging = tiny_spec(name="diverging-ippo", algorithm="ippo", **DIVERGING_PPO)
    experiment_id = submit(diverging)

    outcome = run_experiment(experiment_id, session_factory, storage, limits)

    assert outcome == Outcome.DONE
    row = _experiment(session_factory, experiment_id)
    assert row.status == S.FAILED and row.finished_at is not None
    assert row.status_reason is not None
    assert row.status_reason.startswith("non-finite loss at step 500: learner/loss = nan")
    assert row.step == 500
    keys = _metric_keys(session_factory, experiment_id)
    assert [step for step, name in keys if name == "learner/loss"] == [200, 400, 500]
    assert {(200, "eval/episode_return"), (400, "eval/episode_return")} <= set(keys)
    assert row.latest_metrics["learner/loss"]["step"] == 500
    assert row.latest_metrics["learner/loss"]["value"] is not None
    assert _checkpoint_steps(session_factory, experiment_id) == [200, 400]
    with session_factory() as session:
        logged = session.scalars(
            select(ExperimentEvent.payload).where(
                ExperimentEvent.experiment_id == experiment_id,
                ExperimentEvent.kind == EventKind.LOG,
            )
        ).all()
    errors = [entry["message"] for entry in logged if entry["level"] == "error"]
    assert errors == [f"the run failed: {row.status_reason}"]


def test_a_job_for_a_held_run_is_dropped_and_a_lapsed_one_is_taken_over_from_its_checkpoint(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    storage: FilesystemStore,
    limits: RunLimits,
    dispatcher: CeleryDispatcher,
) -> None:
    experiment_id = submit(tiny_spec(total_steps=400))
    # A worker ran it to step 200, checkpointed, and then went silent.
    assert run_experiment(experiment_id, session_factory, storage, limits) == Outcome.DONE
    with session_factory() as session:
        CheckpointRepository(session).delete(
            [c for c in CheckpointRepository(session).all_of(experiment_id) if c.step > 200]
        )
        MetricRepository(session).delete_after(experiment_id, 200)
        transition(
            session, experiment_id, [S.SUCCEEDED], S.RUNNING, None, step=300,
            **leases.hold("w-lost", 30.0),
        )  # fmt: skip
        session.commit()

    # A redelivered message of a run another worker holds is dropped: nothing changes.
    assert run_experiment(experiment_id, session_factory, storage, limits) == Outcome.DONE
    assert _experiment(session_factory, experiment_id).worker_id == "w-lost"

    later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=31)
    taken = leases.reap(session_factory, dispatcher, 30.0, now=later)
    assert [t.reason for t in taken if t.experiment_id == experiment_id] == [
        "worker w-lost lost at step 300; "
        "restarting from the checkpoint at step 200 (restart 1 of 3)"
    ]
    run_experiment(experiment_id, session_factory, storage, limits, worker_id="w-new")

    row = _experiment(session_factory, experiment_id)
    assert (row.status, row.restarts, row.worker_id, row.step) == (S.SUCCEEDED, 1, "w-new", 400)
    assert row.lease_expires_at is None
    keys = _metric_keys(session_factory, experiment_id)
    assert len(keys) == len(set(keys))  # steps 201-400 computed again, none twice
    assert _checkpoint_steps(session_factory, experiment_id)[-1] == 400


def test_a_worker_that_lost_its_lease_stops_its_run_and_writes_nothing_more(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    storage: FilesystemStore,
    limits: RunLimits,
) -> None:
    experiment_id = submit(tiny_spec(total_steps=100_000))
    thread, result = _in_thread(
        lambda: run_experiment(experiment_id, session_factory, storage, limits, worker_id="w-old")
    )
    _wait_for_step(session_factory, experiment_id, 200)
    # Another worker took the run over (as after a reaper's takeover and a new claim).
    with session_factory() as session:
        session.execute(
            update(Experiment).where(Experiment.id == experiment_id).values(worker_id="w-new")
        )
        session.commit()
    thread.join(timeout=60)
    assert result == [Outcome.DONE]
    written = _metric_keys(session_factory, experiment_id)
    row = _experiment(session_factory, experiment_id)
    time.sleep(1.0)

    assert not thread.is_alive()
    assert (row.status, row.worker_id) == (S.RUNNING, "w-new")  # the run is left to its holder
    assert _metric_keys(session_factory, experiment_id) == written
    assert _experiment(session_factory, experiment_id).step == row.step


def test_an_unknown_experiment_id_is_dropped(
    session_factory: sessionmaker[Session], storage: FilesystemStore, limits: RunLimits
) -> None:
    assert (
        run_experiment("01JAAAAAAAAAAAAAAAAAAAAAAA", session_factory, storage, limits)
        == Outcome.DONE
    )


def test_a_resume_whose_checkpoint_file_is_gone_fails_and_keeps_every_record(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    storage: FilesystemStore,
    limits: RunLimits,
    dispatcher: CeleryDispatcher,
) -> None:
    experiment_id = submit(tiny_spec(total_steps=400))
    assert run_experiment(experiment_id, session_factory, storage, limits) == Outcome.DONE
    with session_factory() as session:
        transition(session, experiment_id, [S.SUCCEEDED], S.FAILED, "for the test")
        session.commit()
        experiments.resume(session, dispatcher, experiment_id)
    checkpoints = _checkpoint_steps(session_factory, experiment_id)
    metrics = _metric_keys(session_factory, experiment_id)
    storage.checkpoint_dir(experiment_id).joinpath("step-000000000400.ckpt").unlink()

    assert run_experiment(experiment_id, session_factory, storage, limits) == Outcome.DONE

    row = _experiment(session_factory, experiment_id)
    assert row.status == S.FAILED and row.step == 400
    assert row.status_reason == (
        "the checkpoint at step 400 (experiments/"
        f"{experiment_id}/checkpoints/step-000000000400.ckpt) is missing from the artifact "
        "storage, so the run cannot continue from it; its records are kept"
    )
    assert _checkpoint_steps(session_factory, experiment_id) == checkpoints == [200, 400]
    assert _metric_keys(session_factory, experiment_id) == metrics


def test_a_warm_start_whose_checkpoint_is_gone_or_does_not_fit_fails_by_name(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    storage: FilesystemStore,
    limits: RunLimits,
) -> None:
    """The worker checks again what the API checked at submission: a spec stored before the
    parent's file went (or one that never passed the API) fails with the reason, and the
    parent's records are untouched."""
    parent = submit(tiny_spec(total_steps=400))
    assert run_experiment(parent, session_factory, storage, limits) == Outcome.DONE
    with session_factory() as session:
        first, last = CheckpointRepository(session).all_of(parent)
    init = {"experiment_id": parent, "checkpoint_id": last.id}
    narrow = tiny_spec(total_steps=40, init={**init, "checkpoint_id": first.id})
    narrow["hyperparameters"] = {**narrow["hyperparameters"], "hidden_sizes": [16, 16]}
    misfit = submit(narrow)
    assert run_experiment(misfit, session_factory, storage, limits) == Outcome.DONE
    row = _experiment(session_factory, misfit)
    assert row.status == S.FAILED
    assert "in the checkpoint" in (row.status_reason or "")
    assert "(networks of other sizes)" in (row.status_reason or "")

    gone = submit(tiny_spec(total_steps=40, init=init))
    storage.checkpoint_dir(parent).joinpath("step-000000000400.ckpt").unlink()
    assert run_experiment(gone, session_factory, storage, limits) == Outcome.DONE
    row = _experiment(session_factory, gone)
    assert row.status == S.FAILED and row.step == 0
    assert row.status_reason == (
        f"the checkpoint {last.id} of experiment {parent} (init) is missing from the artifact "
        "storage"
    )
    assert _checkpoint_steps(session_factory, parent) == [200, 400]
    assert _experiment(session_factory, parent).status == S.SUCCEEDED
    assert not (storage.cache_dir / "init" / f"{gone}.ckpt").exists()


def test_a_run_past_its_storage_limits_fails_and_keeps_its_earlier_checkpoints(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    storage: FilesystemStore,
    limits: RunLimits,
) -> None:
    """MARLFORGE_RUN_MAX_CHECKPOINT_MB and MARLFORGE_PROJECT_MAX_ARTIFACT_MB as a run writes:
    the checkpoint past a limit is neither recorded nor left in the store."""
    probe = submit(tiny_spec(total_steps=400))
    assert run_experiment(probe, session_factory, storage, limits) == Outcome.DONE
    with session_factory() as session:
        first, second = (c.size_bytes for c in CheckpointRepository(session).all_of(probe))
    # The same spec writes the same files: a run limit that holds the first and not both.
    capped = dataclasses.replace(limits, checkpoint_bytes=first + second - 1)
    run = submit(tiny_spec(total_steps=400))
    assert run_experiment(run, session_factory, storage, capped) == Outcome.DONE
    row = _experiment(session_factory, run)
    assert row.status == S.FAILED
    assert (row.status_reason or "").startswith(
        "the checkpoint at step 400 ("
    ) and "past its limit of" in (row.status_reason or "")
    assert "(MARLFORGE_RUN_MAX_CHECKPOINT_MB); the run's earlier checkpoints are kept" in (
        row.status_reason or ""
    )
    assert _checkpoint_steps(session_factory, run) == [200]
    folder = storage.checkpoint_dir(run)
    assert sorted(p.name for p in folder.iterdir()) == ["step-000000000200.ckpt"]

    with session_factory() as session:
        project = _experiment(session_factory, run).project_id
        used = CheckpointRepository(session).project_bytes(project)
    full = dataclasses.replace(limits, project_artifact_bytes=used + first - 1)
    late = submit(tiny_spec(total_steps=400))
    assert run_experiment(late, session_factory, storage, full) == Outcome.DONE
    row = _experiment(session_factory, late)
    assert row.status == S.FAILED
    assert "would take the project's checkpoints to" in (row.status_reason or "")
    assert "(MARLFORGE_PROJECT_MAX_ARTIFACT_MB)" in (row.status_reason or "")
    assert _checkpoint_steps(session_factory, late) == []
    assert not any(storage.checkpoint_dir(late).glob("*.ckpt"))


def test_a_message_starts_the_fairest_run_of_its_queue_and_its_own_run_is_sent_again(
    tmp_path: Path,
    pg_url: str,
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    storage: FilesystemStore,
    limits: RunLimits,
) -> None:
    # A queue of the test's own: other tests' runs in the shared database are not on it.
    prefix = f"fairtest-{secrets.token_hex(3)}."
    dispatcher = CeleryDispatcher(
        Settings(
            var_dir=tmp_path / "var",
            database_url=pg_url,
            broker_url="filesystem://",
            queue_prefix=prefix,
        )
    )

    def submit_to(project: str) -> str:
        with session_factory() as session:
            owner = auth.ensure_project(session, project).id
            spec = parse_spec(tiny_spec(total_steps=200, name=f"{project}-run"))
            return experiments.submit(session, dispatcher, spec, owner).id

    project_a, project_b = f"fair-a-{secrets.token_hex(2)}", f"fair-b-{secrets.token_hex(2)}"
    a1, a2, b1 = submit_to(project_a), submit_to(project_a), submit_to(project_b)
    with session_factory() as session:  # A's first run holds a worker of the queue
        transition(session, a1, [S.QUEUED], S.RUNNING, "held", **leases.hold("w-other", 600))
        session.commit()
    try:
        # Called as a broker's message is (workers.tasks): A's second run's message starts B's run.
        sent_again: list[str] = []
        outcome = run_experiment(
            a2, session_factory, storage, limits, worker_id="w-fair", on_swapped=sent_again.append
        )
        assert outcome == Outcome.DONE
        assert sent_again == [a2]
        ran, waiting = _experiment(session_factory, b1), _experiment(session_factory, a2)
        assert (ran.status, ran.worker_id, ran.step) == (S.SUCCEEDED, "w-fair", 200)
        assert (waiting.status, waiting.attempts) == (S.QUEUED, 0)
        # Called directly (no broker), a run id means that run.
        assert run_experiment(a2, session_factory, storage, limits) == Outcome.DONE
        assert _experiment(session_factory, a2).status == S.SUCCEEDED
    finally:
        with session_factory() as session:
            transition(session, a1, [S.RUNNING], S.FAILED, "test over", **leases.RELEASED)
            session.commit()
