"""The artifact storage failing under a running job: a filesystem that fills up (a real tmpfs of
400 KiB) and a checkpoint folder that becomes unwritable (the immutable attribute, which binds
root too). The run fails naming the checkpoint and the cause; no partial file stays or is listed,
and the checkpoints written before stay recorded, on disk and intact.

Both need root (``mount``, ``chattr``), as CI and the service's own machines have; a developer
without it skips them (CI fails instead)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from core.enums import ExperimentStatus
from core.models import Checkpoint, Experiment, MetricPointRow
from core.storage import FilesystemStore
from tests.conftest import ON_CI
from workers.outcome import Outcome, RunLimits
from workers.runs.job import run_experiment

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def _needs_root(what: str) -> None:
    if os.geteuid() != 0:
        message = f"{what} needs root"
        if ON_CI:
            pytest.fail(f"{message} (CI=true: this fault test must run)", pytrace=False)
        pytest.skip(message)


@pytest.fixture
def small_filesystem(tmp_path: Path) -> Iterator[Path]:
    """A 400 KiB tmpfs: room for about five checkpoints of the tiny spec."""
    _needs_root("mounting a tmpfs")
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(mount_point)], check=True
    )
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _checkpoints(sessions: sessionmaker[Session], experiment_id: str) -> list[Checkpoint]:
    with sessions() as session:
        return list(
            session.scalars(
                select(Checkpoint)
                .where(Checkpoint.experiment_id == experiment_id)
                .order_by(Checkpoint.step)
            )
        )


def _assert_failed_with_history_intact(
    sessions: sessionmaker[Session], storage: FilesystemStore, experiment_id: str, cause: str
) -> Experiment:
    with sessions() as session:
        row = session.get(Experiment, experiment_id, populate_existing=True)
        assert row is not None
        points = session.scalar(
            select(MetricPointRow.id).where(MetricPointRow.experiment_id == experiment_id).limit(1)
        )
    assert row.status == ExperimentStatus.FAILED
    assert row.status_reason is not None and "could not be written to the artifact storage" in (
        row.status_reason
    )
    assert cause in row.status_reason, row.status_reason
    assert points is not None  # the metrics reported before the fault are kept
    kept = _checkpoints(sessions, experiment_id)
    assert kept, "the checkpoints written before the fault are still listed"
    for checkpoint in kept:
        data = storage.resolve(checkpoint.path).read_bytes()
        assert hashlib.sha256(data).hexdigest() == checkpoint.sha256
    folder = storage.checkpoint_dir(experiment_id)
    assert sorted(p.name for p in folder.iterdir()) == sorted(Path(c.path).name for c in kept), (
        "a partial or unlisted file was left"
    )
    return row


def test_a_full_artifact_filesystem_fails_the_run_and_keeps_its_checkpoints(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    limits: RunLimits,
    small_filesystem: Path,
) -> None:
    storage = FilesystemStore(small_filesystem)
    experiment_id = submit(
        tiny_spec(total_steps=6000, checkpoint={"every_steps": 200, "keep_last": 1000})
    )

    assert run_experiment(experiment_id, session_factory, storage, limits) == Outcome.DONE

    row = _assert_failed_with_history_intact(
        session_factory, storage, experiment_id, "No space left on device"
    )
    assert 0 < row.step < 6000


def test_an_unwritable_checkpoint_folder_fails_the_run_and_keeps_its_checkpoints(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    storage: FilesystemStore,
    limits: RunLimits,
) -> None:
    _needs_root("chattr +i")
    experiment_id = submit(
        tiny_spec(total_steps=100_000, checkpoint={"every_steps": 200, "keep_last": 1000})
    )
    result: list[Outcome] = []
    thread = threading.Thread(
        target=lambda: result.append(
            run_experiment(experiment_id, session_factory, storage, limits)
        )
    )
    thread.start()
    folder = storage.checkpoint_dir(experiment_id)
    deadline = time.monotonic() + 120
    while len(_checkpoints(session_factory, experiment_id)) < 2:
        assert time.monotonic() < deadline, "no checkpoint was written"
        time.sleep(0.05)
    subprocess.run(["chattr", "+i", str(folder)], check=True)
    try:
        thread.join(timeout=120)
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=False)

    assert result == [Outcome.DONE]
    _assert_failed_with_history_intact(
        session_factory, storage, experiment_id, "Operation not permitted"
    )
