"""Fair dispatch: which queued run of a queue a worker starts next, and a run's place in that order.

A message on a queue is a claim on that queue, not on its own run: the worker that takes it starts
the first run of its queue (``experiments.queue``) in this order, and sends the message's own run
a message again when that is another run (``workers.runs.job``). The order:

1. **Interrupted runs first**: a run the service itself put back in its queue after it had started
   (a lost worker's takeover, a stopping worker, a local worker's restart: ``interrupted_at``),
   the longest interrupted first. Work already paid for is not made to wait behind new work.
2. **Then the project with the fewest runs on the queue's workers** (``running`` or
   ``cancelling`` runs of the queue): one project's backlog cannot hold every worker while another
   project's run waits.
3. **Ties go to the project that started a run on the queue least recently** (a project that never
   did comes first), so projects take turns when workers free up one at a time;
4. **then to the run queued first** (within a project: first in, first out).

Every project weighs the same; a project's own limits (``MARLFORGE_PROJECT_MAX_ACTIVE_RUNS``,
``core.quotas``) bound how many of its runs can wait at all. The order is computed from the
database alone, so a run's ``queue_position`` is its place in it, if nothing else changed
meanwhile (a run that starts or ends, or a new run, moves it). A run queued before the
``queue`` column existed has no queue: its own message starts it, and its position counts the runs
of its backend queued before it, as before.
"""

from __future__ import annotations

import datetime as dt
import heapq
import math
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from core.enums import ExperimentStatus
from core.models import Experiment

S = ExperimentStatus

HELD = (S.RUNNING, S.CANCELLING)

MAX_WAITING = 10_000
"""The most queued runs of one queue the order looks at (the first queued first); the active-run
quota of each project keeps real queues far below it."""


@dataclass(frozen=True)
class Waiting:
    """A queued run, as the order sees it."""

    id: str
    project_id: str
    queued_at: dt.datetime
    interrupted_at: dt.datetime | None = None


@dataclass(frozen=True)
class Queue:
    """A queue's state: its queued runs, and per project its runs on the queue's workers and when
    it last started one there."""

    waiting: Sequence[Waiting]
    holding: dict[str, int] = field(default_factory=dict)
    last_start: dict[str, dt.datetime] = field(default_factory=dict)


def order(queue: Queue) -> Iterator[str]:
    """The ids of the queue's runs in the order workers start them (see the module's docstring),
    each start counted against its project as the next is chosen."""
    holding: defaultdict[str, int] = defaultdict(int, queue.holding)
    # A project that never started a run on the queue ranks before any that did; one just chosen
    # ranks after all (its start is the latest).
    last = {p: t.timestamp() for p, t in queue.last_start.items()}
    interrupted = sorted(
        (w for w in queue.waiting if w.interrupted_at is not None),
        key=lambda w: (w.interrupted_at, w.queued_at, w.id),
    )
    fresh: defaultdict[str, list[Waiting]] = defaultdict(list)
    for run in sorted(queue.waiting, key=lambda w: (w.queued_at, w.id)):
        if run.interrupted_at is None:
            fresh[run.project_id].append(run)
    clock = max([*last.values(), 0.0])
    for run in interrupted:
        clock += 1.0
        holding[run.project_id] += 1
        last[run.project_id] = clock
        yield run.id

    def rank(project: str) -> tuple[int, float, dt.datetime, str]:
        head = fresh[project][0]
        return (holding[project], last.get(project, -math.inf), head.queued_at, head.id)

    heads = [(rank(p), p) for p in fresh]
    heapq.heapify(heads)
    while heads:
        _, project = heapq.heappop(heads)
        run = fresh[project].pop(0)
        clock += 1.0
        holding[project] += 1
        last[project] = clock
        yield run.id
        if fresh[project]:
            heapq.heappush(heads, (rank(project), project))


def load(session: Session, queue: str) -> Queue:
    """The state of ``queue`` as the database has it."""
    rows = session.execute(
        select(
            Experiment.id, Experiment.project_id, Experiment.updated_at, Experiment.interrupted_at
        )
        .where(Experiment.queue == queue, Experiment.status == S.QUEUED)
        .order_by(Experiment.updated_at, Experiment.id)
        .limit(MAX_WAITING)
    ).all()
    waiting = [Waiting(r[0], r[1], r[2], r[3]) for r in rows]
    projects = sorted({w.project_id for w in waiting})
    if not projects:
        return Queue(waiting)
    held = func.sum(case((Experiment.status.in_(HELD), 1), else_=0))
    stats = session.execute(
        select(Experiment.project_id, held, func.max(Experiment.started_at))
        .where(Experiment.queue == queue, Experiment.project_id.in_(projects))
        .group_by(Experiment.project_id)
    ).all()
    holding = {p: int(n or 0) for p, n, _ in stats}
    last_start = {p: _aware(t) for p, _, t in stats if t is not None}
    return Queue(waiting, holding, last_start)


def position(session: Session, experiment: Experiment) -> int | None:
    """The queued run's place in its queue's order (1: the next run a worker of the queue
    starts); None for a run with no queue, or one no longer queued."""
    if experiment.queue is None or experiment.status != S.QUEUED:
        return None
    for place, run_id in enumerate(order(load(session, experiment.queue)), start=1):
        if run_id == experiment.id:
            return place
    return None


def _aware(value: dt.datetime) -> dt.datetime:
    # The database's values are UTC (``core.db.UTCDateTime``), with or without their zone.
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
