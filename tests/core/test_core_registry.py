"""Queues by backend and resource class, and the registry of workers (``core.dispatch.queue``,
``core.fleet.registry``): which queue a spec's device picks, what a worker's queues say about it,
and its rows written, refreshed, rewritten and removed on PostgreSQL (rolled back) and SQLite."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from core import migrate
from core.db import make_engine, make_session_factory, utcnow
from core.dispatch.queue import (
    declared_queues,
    queue_for,
    requested_device,
    requested_suite,
    worker_queues,
)
from core.enums import ExperimentStatus, ResourceClass
from core.fleet import registry
from core.fleet.repository import WorkerRepository
from core.models import Experiment
from core.settings import Settings
from learners.enums import Backend, Device

GPU, CPU = ResourceClass.GPU, ResourceClass.CPU


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(var_dir=tmp_path, queue_prefix="reg.")


@pytest.mark.parametrize(
    ("backend", "device", "suite", "queue"),
    [
        (Backend.TORCH, Device.CUDA, "mpe", "reg.torch-gpu.mpe"),
        (Backend.TORCH, Device.CPU, "mpe", "reg.torch.mpe"),
        (Backend.TORCH, Device.AUTO, "lbf", "reg.torch.lbf"),
        (Backend.TENSORFLOW, Device.CUDA, "gymnasium", "reg.tensorflow-gpu.gymnasium"),
        (Backend.TENSORFLOW, Device.AUTO, "gridcoop", "reg.tensorflow.gridcoop"),
        # MindSpore's CPU build refuses cuda: its worker fails such a run with the reason.
        (Backend.MINDSPORE, Device.CUDA, "mpe", "reg.mindspore.mpe"),
        (Backend.MINDSPORE, Device.CPU, "mpe", "reg.mindspore.mpe"),
    ],
)
def test_the_spec_device_and_suite_pick_the_queue(
    settings: Settings, backend: Backend, device: Device, suite: str, queue: str
) -> None:
    assert queue_for(settings, backend, device, suite) == queue


def test_every_queue_is_declared_and_only_gpu_backends_have_a_gpu_queue(
    settings: Settings,
) -> None:
    names = [route.name for route in declared_queues(settings, ["mpe", "lbf"])]

    assert names == [
        "reg.torch.mpe",
        "reg.torch.lbf",
        "reg.tensorflow.mpe",
        "reg.tensorflow.lbf",
        "reg.mindspore.mpe",
        "reg.mindspore.lbf",
        "reg.torch-gpu.mpe",
        "reg.torch-gpu.lbf",
        "reg.tensorflow-gpu.mpe",
        "reg.tensorflow-gpu.lbf",
    ]
    # Without suites named: every installed one, the example plugin's included.
    installed = {route.suite for route in declared_queues(settings)}
    assert {"gymnasium", "mpe", "lbf", "gridcoop"} <= installed


def test_a_stored_spec_without_a_known_device_is_auto() -> None:
    assert requested_device({"device": "cuda"}) == Device.CUDA
    assert requested_device({}) == Device.AUTO
    assert requested_device({"device": "tpu"}) == Device.AUTO


def test_a_stored_spec_names_its_suite() -> None:
    assert requested_suite({"env": {"suite": "lbf", "id": "x"}}) == "lbf"
    assert requested_suite({"env": {"id": "Pendulum-v1"}}) == "gymnasium"
    assert requested_suite({}) == "gymnasium"


def test_a_gpu_worker_reads_its_gpu_queues_first(settings: Settings) -> None:
    both = [Backend.TORCH, Backend.MINDSPORE]

    assert worker_queues(settings, both, suites=["mpe"]) == ["reg.torch.mpe", "reg.mindspore.mpe"]
    assert worker_queues(settings, both, on_gpu=[Backend.TORCH], suites=["mpe", "lbf"]) == [
        "reg.torch-gpu.mpe",
        "reg.torch-gpu.lbf",
        "reg.torch.mpe",
        "reg.torch.lbf",
        "reg.mindspore.mpe",
        "reg.mindspore.lbf",
    ]


def test_a_workers_rows_come_from_its_queues(settings: Settings) -> None:
    queues = ["reg.torch-gpu.mpe", "reg.torch.mpe", "reg.mindspore.mpe", "someone-else.torch.mpe"]
    gpus = {Backend.TORCH: ["NVIDIA H100 80GB HBM3"]}

    rows = registry.registrations(settings, "w-1", "host-a", queues, gpus, ["mpe"])

    assert rows == [
        registry.Registration(
            "w-1", "host-a", Backend.TORCH, ("reg.torch-gpu.mpe", "reg.torch.mpe"), GPU,
            ("NVIDIA H100 80GB HBM3",), ("mpe",),
        ),
        registry.Registration(
            "w-1", "host-a", Backend.MINDSPORE, ("reg.mindspore.mpe",), CPU, (), ("mpe",)
        ),
    ]  # fmt: skip


@pytest.fixture(params=["postgresql", "sqlite"])
def sessions(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[sessionmaker[Session]]:
    """Sessions on PostgreSQL (the test's rolled-back transaction) or on a SQLite file built by
    the migrations."""
    if request.param == "postgresql":
        yield request.getfixturevalue("rollback_sessions")
        return
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    migrate.upgrade(url)
    engine = make_engine(url)
    try:
        yield make_session_factory(engine)
    finally:
        engine.dispose()


def _rows(sessions: sessionmaker[Session], worker_id: str) -> list[tuple[Backend, str, str]]:
    with sessions() as session:
        return [
            (r.backend, r.resource_class, r.last_seen_at.isoformat())
            for r in WorkerRepository(session).of(worker_id)
        ]


@pytest.mark.integration
def test_a_worker_registers_beats_and_unregisters(
    sessions: sessionmaker[Session], settings: Settings
) -> None:
    queues = ["reg.torch-gpu.mpe", "reg.torch.mpe", "reg.mindspore.mpe"]
    rows = registry.registrations(settings, "w-2", "host-b", queues, {Backend.TORCH: ["H100"]})
    started = utcnow() - dt.timedelta(seconds=10)

    registry.beat(sessions, rows, started, now=started)
    first = _rows(sessions, "w-2")
    registry.beat(sessions, rows, started, now=started + dt.timedelta(seconds=5))
    second = _rows(sessions, "w-2")

    assert [(b, c) for b, c, _ in first] == [(Backend.MINDSPORE, CPU), (Backend.TORCH, GPU)]
    assert all(later > earlier for (*_, earlier), (*_, later) in zip(first, second, strict=True))
    with sessions() as session:
        (torch,) = [r for r in WorkerRepository(session).of("w-2") if r.backend == Backend.TORCH]
        assert torch.queues == ["reg.torch-gpu.mpe", "reg.torch.mpe"] and torch.gpus == ["H100"]
        assert torch.hostname == "host-b" and torch.started_at == started
        live = WorkerRepository(session).backends_with(GPU, started)
        assert Backend.TORCH in live and Backend.MINDSPORE not in live

    # Rows removed behind its back (a purge) are written again by its next beat.
    assert registry.unregister(sessions, "w-2") == 2
    assert _rows(sessions, "w-2") == []
    registry.beat(sessions, rows, started, now=started + dt.timedelta(seconds=10))
    assert len(_rows(sessions, "w-2")) == 2
    assert registry.unregister(sessions, "w-2") == 2


@pytest.mark.integration
def test_a_worker_that_registers_forgets_rows_not_seen_for_a_day(
    sessions: sessionmaker[Session], settings: Settings
) -> None:
    now = utcnow()
    old = now - registry.FORGET_AFTER - dt.timedelta(minutes=1)
    gone = registry.registrations(settings, "w-gone", "host-c", ["reg.torch.mpe"], {})
    registry.beat(sessions, gone, old, now=old)
    assert _rows(sessions, "w-gone")

    fresh = registry.registrations(settings, "w-new", "host-c", ["reg.torch.mpe"], {})
    registry.beat(sessions, fresh, now, now=now)

    assert _rows(sessions, "w-gone") == []
    assert len(_rows(sessions, "w-new")) == 1
    registry.unregister(sessions, "w-new")


def _queued(suite: str, backend: Backend = Backend.TORCH) -> Experiment:
    return Experiment(
        id=f"run-{suite}" + ("-tf" if backend == Backend.TENSORFLOW else ""),
        backend=backend,
        status=ExperimentStatus.QUEUED,
        status_reason=None,
        spec={"env": {"suite": suite, "id": "x"}, "device": "cpu"},
    )


@pytest.mark.integration
def test_a_run_says_it_waits_while_no_live_worker_of_its_backend_serves_its_suite(
    sessions: sessionmaker[Session], settings: Settings
) -> None:
    # Ten minutes ahead: live rows are then only this test's (workers of other tests beat in the
    # same database), and nothing they wrote is old enough to be forgotten by these beats.
    now = utcnow() + dt.timedelta(minutes=10)
    mpe_only = registry.registrations(
        settings, "w-mpe", "host-d", ["reg.torch.mpe"], {}, ("gymnasium", "mpe")
    )
    registry.beat(sessions, mpe_only, now, now=now)
    runs = [_queued("gridcoop"), _queued("mpe"), _queued("gridcoop", Backend.TENSORFLOW)]
    with sessions() as session:
        served = WorkerRepository(session).suites_served(registry.live_since(60, now))
        reasons = registry.status_reasons(session, runs, 60, now)
    assert served == {Backend.TORCH: {"gymnasium", "mpe"}}
    assert reasons["run-gridcoop"] == (
        "waiting for a worker that serves the gridcoop environments: the live torch workers "
        "serve gymnasium, mpe (docs/environments.md, 'Which workers serve a suite')"
    )
    # Its suite is served; and no tensorflow worker is live at all, which is not this reason.
    assert reasons["run-mpe"] is None and reasons["run-gridcoop-tf"] is None

    # A second torch worker that serves it: the reason is gone at the next read.
    every = registry.registrations(
        settings, "w-all", "host-e", ["reg.torch.mpe"], {}, ("gridcoop",)
    )
    registry.beat(sessions, every, now, now=now)
    with sessions() as session:
        assert registry.status_reasons(session, runs, 60, now)["run-gridcoop"] is None
    registry.unregister(sessions, "w-mpe")
    registry.unregister(sessions, "w-all")
