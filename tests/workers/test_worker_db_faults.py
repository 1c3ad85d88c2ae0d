"""The database's connections cut under a running job: ``pg_terminate_backend`` on every
connection of the test's database, idle ones and ones inside a transaction, from another
connection, while a real run trains in its own process; and the whole database away for 15 s.
The run must finish with its metrics whole (none lost, none twice) and its events unique, and an
outage shorter than the lease costs it nothing."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from core.db import make_engine, make_session_factory
from core.dispatch.queue import CeleryDispatcher
from core.enums import ExperimentStatus
from core.experiments import service as experiments
from core.models import Experiment, ExperimentEvent, MetricPointRow
from core.storage import FilesystemStore
from learners.admission.parse import parse_spec
from tests.auth_support import default_project_id
from tests.conftest import migrated_database
from tests.db_outage_support import Outage
from workers.outcome import Outcome, RunLimits
from workers.runs.job import run_experiment

pytestmark = [pytest.mark.slow, pytest.mark.integration]

IN_A_TRANSACTION = "state IN ('active', 'idle in transaction')"
VICTIM = "marlforge-cut-me"
"""The application name of the job's connections (its worker's and its run process's): the only
ones cut, so that the session's other connections (fixtures, other stacks) are left alone."""


class Cutter:
    """Terminates the job's connections, from a connection of its own."""

    def __init__(self, pg_url: str) -> None:
        self.engine: Engine = create_engine(pg_url, isolation_level="AUTOCOMMIT")
        self.cut_mid_transaction = 0
        self.cut_idle = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _terminate(self, where: str) -> int:
        query = text(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
            f"WHERE datname = current_database() AND application_name = '{VICTIM}' AND {where}"
        )
        with self.engine.connect() as connection:
            return int(connection.execute(query).scalar_one())

    def _loop(self) -> None:
        rounds = 0
        while not self._stop.wait(0.02):
            # Mostly connections inside a transaction (a flush, a renewal); now and then all.
            self.cut_mid_transaction += self._terminate(IN_A_TRANSACTION)
            rounds += 1
            if rounds % 25 == 0:
                self.cut_idle += self._terminate("state = 'idle'")
            if self.cut_mid_transaction >= 6:
                return

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.engine.dispose()


def _keys(sessions: sessionmaker[Session], experiment_id: str) -> list[tuple[int, str]]:
    with sessions() as session:
        rows = session.execute(
            select(MetricPointRow.step, MetricPointRow.name)
            .where(MetricPointRow.experiment_id == experiment_id)
            .order_by(MetricPointRow.step, MetricPointRow.name)
        ).all()
    return [(int(s), str(n)) for s, n in rows]


def test_a_run_survives_its_database_connections_cut_mid_transaction(
    submit: Callable[..., str],
    tiny_spec: Callable[..., dict[str, Any]],
    session_factory: sessionmaker[Session],
    storage: FilesystemStore,
    limits: RunLimits,
    pg_url: str,
) -> None:
    spec = tiny_spec(total_steps=2400, checkpoint={"every_steps": 400, "keep_last": 2})
    reference = submit(spec)
    assert run_experiment(reference, session_factory, storage, limits) == Outcome.DONE

    cut = submit(spec)
    # The job's own engine, named: its run process opens its connections on the same URL.
    named = make_url(pg_url).update_query_dict({"application_name": VICTIM})
    job_engine = make_engine(named.render_as_string(hide_password=False))
    job_sessions = make_session_factory(job_engine)
    result: list[Outcome] = []
    thread = threading.Thread(
        target=lambda: result.append(run_experiment(cut, job_sessions, storage, limits))
    )
    thread.start()
    deadline = time.monotonic() + 120
    while True:
        with session_factory() as session:
            if (session.get(Experiment, cut) or Experiment()).step >= 200:
                break
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.05)
    cutter = Cutter(pg_url)
    cutter.start()
    thread.join(timeout=300)
    cutter.stop()
    job_engine.dispose()

    assert cutter.cut_mid_transaction >= 1, "no connection was cut inside a transaction"
    assert result == [Outcome.DONE]
    with session_factory() as session:
        row = session.get(Experiment, cut, populate_existing=True)
        assert row is not None
        assert (row.status, row.step, row.attempts) == (ExperimentStatus.SUCCEEDED, 2400, 1)
        ids = list(
            session.scalars(
                select(ExperimentEvent.id)
                .where(ExperimentEvent.experiment_id == cut)
                .order_by(ExperimentEvent.id)
            )
        )
    assert len(ids) == len(set(ids))
    # Every point the uninterrupted run reported, at the same steps, once.
    assert _keys(session_factory, cut) == _keys(session_factory, reference)
    print(f"connections cut: {cutter.cut_mid_transaction} in a transaction, {cutter.cut_idle} idle")


OUTAGE_S = 15.0
"""Longer than a transaction's retries (about 8 s), shorter than the lease (60 s)."""


def test_a_database_outage_shorter_than_the_lease_is_waited_out_not_blamed_on_the_worker(
    tiny_spec: Callable[..., dict[str, Any]],
    storage: FilesystemStore,
    limits: RunLimits,
    dispatcher: CeleryDispatcher,
) -> None:
    """The run's database refuses every connection for 15 s mid-run: the run goes on, writes
    every report once the database is back, and ends succeeded on its first attempt with no
    restart spent; its log says the database was away."""
    spec = tiny_spec(total_steps=2400, checkpoint={"every_steps": 400, "keep_last": 2})
    with migrated_database("marlforge_outage") as url:
        engine = make_engine(url)
        sessions = make_session_factory(engine)

        def submit() -> str:
            with sessions() as session:
                project = default_project_id(session)
                return experiments.submit(session, dispatcher, parse_spec(spec), project).id

        reference = submit()
        assert run_experiment(reference, sessions, storage, limits) == Outcome.DONE
        run = submit()
        result: list[Outcome] = []
        thread = threading.Thread(
            target=lambda: result.append(run_experiment(run, sessions, storage, limits))
        )
        thread.start()
        deadline = time.monotonic() + 120
        while True:
            with sessions() as session:
                if (session.get(Experiment, run) or Experiment()).step >= 200:
                    break
            assert time.monotonic() < deadline, "the run never started"
            time.sleep(0.05)
        outage = Outage(url)
        outage.start()
        try:
            time.sleep(OUTAGE_S)
        finally:
            outage.end()
        thread.join(timeout=300)

        assert result == [Outcome.DONE]
        with sessions() as session:
            row = session.get(Experiment, run)
            assert row is not None
            assert (row.status, row.step, row.attempts, row.restarts) == (
                ExperimentStatus.SUCCEEDED, 2400, 1, 0
            ), row.status_reason  # fmt: skip
            logs = [
                e.payload["message"]
                for e in session.scalars(
                    select(ExperimentEvent).where(
                        ExperimentEvent.experiment_id == run, ExperimentEvent.kind == "log"
                    )
                )
            ]
        assert any(m.startswith("the database was unreachable for ") for m in logs), logs
        # Every point the uninterrupted run reported, at the same steps, once.
        assert _keys(sessions, run) == _keys(sessions, reference)
        engine.dispose()
