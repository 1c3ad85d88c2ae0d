"""The service's state as Prometheus metrics, read afresh at every scrape (``GET /metrics``).

``ServiceCollector`` is a Prometheus collector: each scrape runs the few aggregate queries of
``core.monitoring.repository`` and asks the broker how many messages wait, so the numbers are the
database's and the broker's own, the same from every API replica, and nothing is kept in memory
between scrapes. They cover every project and name none: no project, experiment or key appears in a
label. ``docs/deployment.md`` ("Monitoring") lists every metric.

A scrape that cannot read the database or the broker still answers: ``marlforge_source_up`` says
which source failed, and that source's metrics are left out (an absent series, not a false zero).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from core.dispatch.queue import queue_name, waiting_messages
from core.enums import ExperimentStatus, FailureClass, ResourceClass
from core.monitoring.repository import LostWorkers, StatsRepository
from core.settings import Settings
from learners.api import Backend

log = logging.getLogger(__name__)

RUNS = "marlforge_runs"
QUEUED = "marlforge_queued_runs"
BROKER = "marlforge_broker_queue_messages"
TAKEOVERS = "marlforge_takeovers"
RESTARTS = "marlforge_restarts"
FAILED = "marlforge_failed_runs"
SOURCE_UP = "marlforge_source_up"


class ServiceCollector:
    """Collects the metrics of the module's docstring for one deployment (``settings``)."""

    def __init__(self, session_factory: sessionmaker[Session], settings: Settings) -> None:
        self.session_factory = session_factory
        self.settings = settings

    def describe(self) -> Iterator[Metric]:
        """The metric families, without samples (the registry checks their names once)."""
        yield from _run_families({}, LostWorkers(0, 0), {}, self.settings)
        yield _broker_family({}, self.settings)
        yield _source_up()

    def collect(self) -> Iterator[Metric]:
        """One scrape's samples."""
        up = _source_up()
        try:
            with self.session_factory() as session:
                stats = StatsRepository(session)
                runs = stats.runs_by_status_and_backend()
                lost = stats.lost_workers()
                failed = stats.failed_by_class()
        except SQLAlchemyError as exc:
            log.warning("metrics: the database is unreachable: %s", exc)
            up.add_metric(["database"], 0)
        else:
            up.add_metric(["database"], 1)
            yield from _run_families(runs, lost, failed, self.settings)
        try:
            waiting = waiting_messages(self.settings)
        except Exception as exc:  # redis and kombu raise several types; all mean "unreachable"
            log.warning("metrics: the broker's queues cannot be read: %s", exc)
            up.add_metric(["broker"], 0)
        else:
            if waiting is not None:
                up.add_metric(["broker"], 1)
                yield _broker_family(waiting, self.settings)
        yield up


def _run_families(
    runs: dict[tuple[ExperimentStatus, Backend], int],
    lost: LostWorkers,
    failed: dict[FailureClass, int],
    settings: Settings,
) -> Iterator[Metric]:
    # Every label value is written, zeros too: a series that appears only once it is non-zero
    # makes rate() and alerts on it miss the first change.
    by_status = GaugeMetricFamily(
        RUNS, "Experiments by status and backend.", labels=["status", "backend"]
    )
    for status in ExperimentStatus:
        for backend in Backend:
            by_status.add_metric([status.value, backend.value], runs.get((status, backend), 0))
    yield by_status
    queued = GaugeMetricFamily(
        QUEUED,
        "Experiments queued for each backend's queue (the database's count: what waits for a "
        "worker, including runs requeued after a lost worker).",
        labels=["backend", "queue"],
    )
    for backend in Backend:
        queued.add_metric(
            [backend.value, queue_name(settings, backend)],
            runs.get((ExperimentStatus.QUEUED, backend), 0),
        )
    yield queued
    yield CounterMetricFamily(
        TAKEOVERS,
        "Runs taken from a worker that was lost (its lease lapsed): requeued, or ended when not "
        "restarted.",
        value=lost.takeovers,
    )
    yield CounterMetricFamily(
        RESTARTS, "Takeovers that queued the run again (the sum of every run's restarts).",
        value=lost.restarts,
    )  # fmt: skip
    by_class = GaugeMetricFamily(
        FAILED, "Experiments now failed, by the class of their reason.", labels=["reason"]
    )
    for kind in FailureClass:
        by_class.add_metric([kind.value], failed.get(kind, 0))
    yield by_class


def _broker_family(waiting: dict[tuple[Backend, ResourceClass], int], settings: Settings) -> Metric:
    family = GaugeMetricFamily(
        BROKER,
        "Messages waiting in each backend's queues, and its GPU queues where it has them, over "
        "every environment suite (Redis LLEN; a worker's running job is not counted).",
        labels=["backend", "queue"],
    )
    for (backend, klass), count in waiting.items():
        family.add_metric([backend.value, queue_name(settings, backend, klass)], count)
    return family


def _source_up() -> GaugeMetricFamily:
    return GaugeMetricFamily(
        SOURCE_UP,
        "1 when this scrape could read the source (database, broker), else 0 and its metrics are "
        "left out.",
        labels=["source"],
    )
