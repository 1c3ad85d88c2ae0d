"""The guards around a run's process (``workers.supervisor`` through ``run_experiment``), with real
child processes, real training and the session's PostgreSQL database.

Every spec here stays within the limits a submission is held to (``learners.admission.budget``):
the point of the guards is that a spec judged fine can still outgrow its memory or stop reading
its status.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
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
from core.models import Checkpoint, Experiment, ExperimentEvent, MetricPointRow
from core.storage import FilesystemStore
from workers.outcome import Outcome, RunLimits
from workers.runs.job import run_experiment
from workers.supervisor import Ending, Guards, supervise

S = ExperimentStatus
pytestmark = [pytest.mark.integration]

# Four networks (actor, critic and their targets) of eight 2,048-unit layers: about 470 MiB of
# weights, and as much again of Adam's moments at the first update; the widths pass the spec bounds.
WIDE_NETWORKS = {"hidden_sizes": [2048] * 8}
# Between what a tiny PyTorch run's process holds (~335 MiB at most on this project's machine) and
# what the wide networks make it hold (~800 MiB). Fixed, not relative to this process: under
# pytest-xdist the test process may have imported TensorFlow and MindSpore too (GBs).
BUDGET_MB = 560
# 128 updates of 2,048-unit networks on 256-sample batches before the first status read: a minute
# or more inside one iteration of the training loop, where no status is read.
LONG_FIRST_STEP = {
    "hidden_sizes": [2048, 2048],
    "learning_starts": 0,
    "batch_size": 256,
    "updates_per_step": 64,
}


def _with(
    tiny_spec: Callable[..., dict[str, Any]], hyperparameters: dict[str, Any], **changes: Any
) -> dict[str, Any]:
    """The tiny spec with some hyperparameters changed."""
    return tiny_spec(
        hyperparameters={**tiny_spec()["hyperparameters"], **hyperparameters}, **changes
    )


def _experiment(session_factory: sessionmaker[Session], experiment_id: str) -> Experiment:
    with session_factory() as session:
        row = session.get(Experiment, experiment_id)
        assert row is not None
        return row


def _checkpoints(session_factory: sessionmaker[Session], experiment_id: str) -> list[Checkpoint]:
    with session_factory() as session:
        return list(
            session.scalars(
                select(Checkpoint)
                .where(Checkpoint.experiment_id == experiment_id)
                .order_by(Checkpoint.step)
            )
        )


def _metric_count(session_factory: sessionmaker[Session], experiment_id: str) -> int:
    with session_factory() as session:
        rows = session.scalars(
            select(MetricPointRow.step).where(MetricPointRow.experiment_id == experiment_id)
        )
        return len(list(rows))


def _log_messages(session_factory: sessionmaker[Session], experiment_id: str) -> list[str]:
    with session_factory() as session:
        events = session.scalars(
            select(ExperimentEvent)
            .where(
                ExperimentEvent.experiment_id == experiment_id,
                ExperimentEvent.kind == EventKind.LOG,
            )
            .order_by(ExperimentEvent.id)
        )
        return [str(e.payload["message"]) for e in events]


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout} s for {what}"
        time.sleep(0.05)


def _wait_until_training(session_factory: sessionmaker[Session], experiment_id: str) -> None:
    """Until the run has logged that it trains (its last status read before the first step)."""
    _wait_for(
        lambda: any(
            m.startswith("training") for m in _log_messages(session_factory, experiment_id)
        ),
        "the run to start training",
    )


def _in_thread(target: Callable[[], Outcome]) -> tuple[threading.Thread, list[Outcome]]:
    result: list[Outcome] = []
    thread = threading.Thread(target=lambda: result.append(target()), daemon=True)
    thread.start()
    return thread, result


def _run_processes() -> list[int]:
    """This process's children that run a job (spawned by multiprocessing; not its resource
    tracker)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            command = (stat.parent / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if parent == os.getpid() and b"spawn_main" in command:
            found.append(int(stat.parent.name))
    return found


def _square_or_raise(number: int, _stop_requested: Callable[[], bool]) -> int:
    # Runs in the spawned child, which imports this module by name to find it.
    if number < 0:
        raise ValueError(f"no square for {number} here")
    return number * number


@pytest.mark.parametrize(
    ("number", "ending", "value", "detail"),
    [
        (7, Ending.RETURNED, 49, ""),
        (-1, Ending.RAISED, None, "ValueError: no square for -1 here"),
    ],
)
def test_supervise_returns_what_the_child_returned_or_raised(
    number: int, ending: Ending, value: int | None, detail: str
) -> None:
    guards = Guards(poll_interval_s=0.1, memory_mb=4096, stop_grace_s=5)

    result = supervise(
        _square_or_raise,
        number,
        guards,
        cancel_requested=lambda: False,
        shutdown_requested=lambda: False,
    )

    assert (result.ending, result.value, result.detail) == (ending, value, detail)
    assert _run_processes() == []


def test_a_run_over_its_memory_budget_is_killed_and_the_next_job_runs(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    storage: FilesystemStore,
    limits: RunLimits,
) -> None:
    budget_mb = BUDGET_MB
    budget = dataclasses.replace(limits, memory_mb=budget_mb)
    hog = submit(_with(tiny_spec, WIDE_NETWORKS))
    tiny = submit(tiny_spec(total_steps=400))

    started = time.monotonic()
    assert run_experiment(hog, session_factory, storage, budget) == Outcome.DONE
    killed_after = time.monotonic() - started

    row = _experiment(session_factory, hog)
    assert row.status == S.FAILED and row.finished_at is not None
    reason = row.status_reason or ""
    assert re.fullmatch(
        rf"stopped at step {row.step}: the run used [\d,]+ MiB, above its memory budget of "
        rf"{budget_mb:,} MiB \(MARLFORGE_RUN_MEMORY_MB\)",
        reason,
    ), reason
    assert int(reason.split("used ")[1].split(" MiB")[0].replace(",", "")) > budget_mb
    assert reason in _log_messages(session_factory, hog)
    assert killed_after < 30 and _run_processes() == []

    # The same worker, under the same budget, goes on to its next job.
    assert run_experiment(tiny, session_factory, storage, budget) == Outcome.DONE
    done = _experiment(session_factory, tiny)
    assert done.status == S.SUCCEEDED, done.status_reason
    assert _metric_count(session_factory, tiny) > 0
    assert [c.step for c in _checkpoints(session_factory, tiny)] == [200, 400]


def test_a_run_deaf_to_a_cancel_is_stopped_after_the_grace_and_ends_cancelled(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    storage: FilesystemStore,
    limits: RunLimits,
) -> None:
    # Status reads at most once a second, so none falls between the one that logs "training"
    # and the long first iteration: the cancel below arrives while the run cannot read it.
    guarded = dataclasses.replace(limits, poll_interval_s=1.0, cancel_grace_s=2.0)
    experiment_id = submit(_with(tiny_spec, LONG_FIRST_STEP, total_steps=100_000))
    thread, result = _in_thread(
        lambda: run_experiment(experiment_id, session_factory, storage, guarded)
    )
    _wait_until_training(session_factory, experiment_id)

    with session_factory() as session:
        assert experiments.cancel(session, experiment_id).status == S.CANCELLING
    cancelled_at = time.monotonic()
    thread.join(timeout=30)
    stopped_after = time.monotonic() - cancelled_at

    assert result == [Outcome.DONE]
    assert 2.0 < stopped_after < 2.0 + 1.0 + 5.0  # the grace, a poll, some slack
    row = _experiment(session_factory, experiment_id)
    assert row.status == S.CANCELLED and row.finished_at is not None
    assert row.status_reason == (
        f"did not stop within 2 s of the cancel request; stopped by the worker at step {row.step}"
    )
    assert _run_processes() == []


def test_a_run_deaf_to_the_worker_shutdown_is_stopped_after_the_grace_and_requeued(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    storage: FilesystemStore,
    limits: RunLimits,
) -> None:
    guarded = dataclasses.replace(limits, poll_interval_s=1.0, cancel_grace_s=2.0)
    experiment_id = submit(_with(tiny_spec, LONG_FIRST_STEP, total_steps=100_000))
    shutting_down = threading.Event()
    thread, result = _in_thread(
        lambda: run_experiment(
            experiment_id, session_factory, storage, guarded, shutting_down.is_set
        )
    )
    _wait_until_training(session_factory, experiment_id)

    shutting_down.set()
    thread.join(timeout=30)

    assert result == [Outcome.REQUEUE]
    row = _experiment(session_factory, experiment_id)
    assert row.status == S.QUEUED and row.finished_at is None
    assert row.status_reason == (
        f"the worker shut down at step {row.step} (the run did not stop within 2 s); "
        "the run continues from its last checkpoint"
    )
    assert _run_processes() == []


def test_a_run_whose_process_dies_ends_failed_and_keeps_its_history(
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
    _wait_for(lambda: bool(_checkpoints(session_factory, experiment_id)), "a checkpoint")
    # What a writer killed mid-checkpoint leaves behind: a temporary file, never recorded.
    partial = storage.checkpoint_dir(experiment_id) / ".tmp-killed.part"
    partial.write_bytes(b"half a checkpoint")
    (child,) = _run_processes()

    os.kill(child, signal.SIGKILL)  # as the kernel's OOM killer would
    thread.join(timeout=30)

    assert result == [Outcome.DONE]
    row = _experiment(session_factory, experiment_id)
    assert row.status == S.FAILED
    assert row.status_reason == (
        f"the run's process died at step {row.step} (signal SIGKILL (9)) before it recorded an end"
    )
    checkpoints = _checkpoints(session_factory, experiment_id)
    assert checkpoints and all(storage.resolve(c.path).is_file() for c in checkpoints)
    assert _metric_count(session_factory, experiment_id) > 0
    assert not partial.exists()
