"""Retention: compacting the history of runs that finished long ago, keeping what the API and the
dashboard promise about them.

A running MAPPO run writes about 50 event rows a minute, most of them ``progress`` and ``metrics``
events that only live viewers need: the metric points themselves are in ``metric_points``, and
charts are built from those. A run finished more than ``MARLFORGE_RETENTION_DAYS`` ago is
compacted once:

- its ``progress`` and ``metrics`` events are deleted; its ``status``, ``checkpoint`` and ``log``
  events stay with their ids, as do ``status_transitions`` (the timeline) and ``checkpoints``;
- each metric series longer than ``MARLFORGE_RETENTION_MAX_POINTS`` is thinned by the chart rule
  of ``core.metrics.downsample``: it keeps the points a chart of ``CHART_POINTS`` (the dashboard's
  and the API's default size) shows, and those of a chart of the rest of the budget. A chart at
  ``CHART_POINTS`` is then exactly what it was, because a series that holds every point a chart
  picks, and more than the chart's size, gives the same chart (each bucket's extremes are still
  its extremes; only a series whose kept points number 500 or fewer, its steps in a few far-apart
  clusters, then comes back whole). No budget makes every size exact: buckets of another size do
  not nest in these, so a chart at another size may differ where a bucket edge cuts a fine
  bucket; its points are still stored points, and the series' extremes are among them.
- the run is marked (``compacted_at``). A run resumed later is compacted again once it has
  finished and its retention has passed again.

Running, queued and cancelling runs are never touched. Every step is a transaction that first
checks (and on PostgreSQL locks) that the run is still due and deletes at most ``batch_rows``
rows, so a database with millions of rows is compacted in short steps and a resume is never
raced. The last stretch of a series (at most ``batch_rows`` + ``max_points`` points) is thinned in
one transaction, so an interrupted pass always leaves a series longer than ``max_points`` that
holds every kept point, and the next pass plans the same points from it. Several API processes
may compact at once.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar

from sqlalchemy.orm import Session, sessionmaker

from core.background import Periodic
from core.db import utcnow
from core.enums import EventKind
from core.metrics.series import SeriesRepository
from core.retention.repository import RetentionRepository
from core.settings import Settings

log = logging.getLogger(__name__)

T = TypeVar("T")

CHART_POINTS = 500
"""The chart size a compaction keeps exact: the dashboard's and ``GET /v1/metrics``' default."""
BATCH_ROWS = 5000
"""Rows one transaction of a compaction deletes at most (the last stretch of a thinned series goes
at once: up to this many more than ``MARLFORGE_RETENTION_MAX_POINTS``)."""
DROPPED_KINDS = frozenset({EventKind.PROGRESS, EventKind.METRICS})
"""The events a compacted run loses; the points of ``metrics`` events stay in ``metric_points``."""
_RUNS_PER_READ = 100


@dataclass
class CompactionReport:
    """What one ``compact`` call did."""

    compacted: list[str] = field(default_factory=list)
    """The runs whose compaction it completed."""
    events_deleted: int = 0
    points_deleted: int = 0
    transactions: int = 0
    finished: bool = False
    """No run is left due; False when ``max_transactions`` stopped the call first."""


class _Spent(Exception):
    """The call's transaction budget is used up."""


def kept_steps(session: Session, experiment_id: str, name: str, max_points: int) -> set[int]:
    """The steps of the series that a compaction to ``max_points`` keeps: the chart rule's picks
    at ``CHART_POINTS`` and at ``max_points - CHART_POINTS`` (at most ``max_points`` steps)."""
    series = SeriesRepository(session)
    [fine] = series.sample(experiment_id, [name], max_points - CHART_POINTS)
    [chart] = series.sample(experiment_id, [name], CHART_POINTS)
    return {p.step for p in fine.points} | {p.step for p in chart.points}


class _Pass:
    """One ``compact`` call: its cutoff, its budget and its report."""

    def __init__(
        self,
        session_factory: sessionmaker[Session],
        settings: Settings,
        cutoff: dt.datetime,
        batch_rows: int,
        max_transactions: int | None,
    ) -> None:
        self.session_factory = session_factory
        self.max_points = settings.retention_max_points
        self.cutoff = cutoff
        self.batch_rows = batch_rows
        self.max_transactions = max_transactions
        self.report = CompactionReport()

    def run(self) -> CompactionReport:
        after_id = ""
        try:
            while due := self._step(partial(self._due, after_id)):
                for experiment_id in due:
                    if self._compact_run(experiment_id):
                        self.report.compacted.append(experiment_id)
                after_id = due[-1]
        except _Spent:
            return self.report
        self.report.finished = True
        return self.report

    def _due(self, after_id: str, repo: RetentionRepository) -> list[str]:
        return repo.due(self.cutoff, _RUNS_PER_READ, after_id)

    def _compact_run(self, experiment_id: str) -> bool:
        """True when the run is compacted; False when it stopped being due (a resume)."""
        if not self._drop_events(experiment_id):
            return False
        names = self._in_run(experiment_id, lambda s: SeriesRepository(s).names(experiment_id))
        if names is None or not all(self._thin(experiment_id, n) for n in names[0]):
            return False
        now = utcnow()
        marked = self._in_run(
            experiment_id, lambda s: RetentionRepository(s).mark_compacted(experiment_id, now)
        )
        return marked is not None

    def _drop_events(self, experiment_id: str) -> bool:
        after = 0
        while True:
            deleted = self._in_run(
                experiment_id, partial(self._delete_events, experiment_id, after)
            )
            if deleted is None:
                return False
            ids = deleted[0]
            self.report.events_deleted += len(ids)
            if len(ids) < self.batch_rows:
                return True
            after = ids[-1]

    def _thin(self, experiment_id: str, name: str) -> bool:
        """Thin one series (see the module's docstring); False when the run stopped being due."""

        def plan(session: Session) -> set[int] | None:
            if not RetentionRepository(session).longer_than(experiment_id, name, self.max_points):
                return None
            return kept_steps(session, experiment_id, name, self.max_points)

        planned = self._in_run(experiment_id, plan)
        if planned is None:
            return False
        kept = planned[0]
        if kept is None:
            return True  # short enough already
        after: int | None = None
        while True:
            batch = self._in_run(
                experiment_id, partial(self._thin_batch, experiment_id, name, after, kept)
            )
            if batch is None:
                return False
            after, done = batch[0]
            if done:
                return True

    def _delete_events(self, experiment_id: str, after: int, session: Session) -> list[int]:
        """Delete one batch of the run's dropped events after event ``after``; their ids."""
        return RetentionRepository(session).delete_events(
            experiment_id, DROPPED_KINDS, after, self.batch_rows
        )

    def _thin_batch(
        self, experiment_id: str, name: str, after: int | None, kept: set[int], session: Session
    ) -> tuple[int | None, bool]:
        """Delete the next ``batch_rows`` points after step ``after`` that are not ``kept``; the
        step to go on after, and whether the series' end was reached.

        The last stretch (the series holds at most ``max_points + batch_rows``) goes in one
        transaction, so an interrupted compaction leaves a series longer than ``max_points`` and
        holding every kept point: the next call plans the same points from it. Pages of kept
        points are read past, not counted, so each transaction deletes a whole batch."""
        repo = RetentionRepository(session)
        last = not repo.longer_than(experiment_id, name, self.max_points + self.batch_rows)
        quota = None if last else self.batch_rows
        dropped: list[tuple[int, int]] = []
        done = False
        while not done and (quota is None or len(dropped) < quota):
            page = repo.point_page(experiment_id, name, after, self.batch_rows)
            droppable = [(point_id, step) for point_id, step in page if step not in kept]
            take = droppable if quota is None else droppable[: quota - len(dropped)]
            dropped.extend(take)
            if len(take) < len(droppable):
                after = take[-1][1]  # the batch filled up inside this page
                break
            after = page[-1][1] if page else after
            done = len(page) < self.batch_rows
        repo.delete_points(experiment_id, name, dropped)
        self.report.points_deleted += len(dropped)
        return after, done

    def _in_run(self, experiment_id: str, work: Callable[[Session], T]) -> tuple[T] | None:
        """``work``'s result (in a 1-tuple) in a transaction of its own while the run is still
        due; None when it is not any more."""

        def guarded(repo: RetentionRepository) -> tuple[T] | None:
            if not repo.hold_if_due(experiment_id, self.cutoff):
                return None
            return (work(repo.session),)

        return self._step(guarded)

    def _step(self, work: Callable[[RetentionRepository], T]) -> T:
        """``work`` in a transaction of its own, counted against the budget."""
        if self.max_transactions is not None and self.report.transactions >= self.max_transactions:
            raise _Spent
        with self.session_factory() as session:
            result = work(RetentionRepository(session))
            session.commit()
        self.report.transactions += 1
        return result


def compact(
    session_factory: sessionmaker[Session],
    settings: Settings,
    now: dt.datetime | None = None,
    *,
    batch_rows: int = BATCH_ROWS,
    max_transactions: int | None = None,
) -> CompactionReport:
    """Compact every run finished more than ``settings.retention_days`` before ``now`` (see the
    module's docstring), in transactions of at most ``batch_rows`` rows; stop after
    ``max_transactions`` of them (the next call continues)."""
    if settings.retention_days == 0:
        return CompactionReport(finished=True)
    cutoff = (now or utcnow()) - dt.timedelta(days=settings.retention_days)
    return _Pass(session_factory, settings, cutoff, batch_rows, max_transactions).run()


class Compactor(Periodic):
    """Runs ``compact`` every ``settings.retention_interval_s`` in a daemon thread until ``stop``
    (``marlforge api`` runs one beside the lease reaper). A backlog is worked off in calls of
    ``PASS_TRANSACTIONS`` transactions a second apart, so a stop never waits long."""

    FIRST_PASS_S = 60.0
    """The first pass comes this soon after the start (or after one interval, if shorter): an API
    restarted more often than the interval still compacts."""
    PASS_TRANSACTIONS = 100

    def __init__(self, session_factory: sessionmaker[Session], settings: Settings) -> None:
        interval_s = settings.retention_interval_s
        super().__init__("compactor", interval_s, min(self.FIRST_PASS_S, interval_s))
        self.session_factory = session_factory
        self.settings = settings

    def work(self) -> float | None:
        report = compact(
            self.session_factory, self.settings, max_transactions=self.PASS_TRANSACTIONS
        )
        if report.compacted:
            log.info("compacted %d run(s)", len(report.compacted))
        return None if report.finished else 1.0
