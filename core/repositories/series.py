"""Whole metric series of several runs, for charts and exports (``metric_points``).

A chart of a long series is shrunk in the database (the rule is ``core.downsample``'s): the API
reads each bucket's picks, never the series. ``names`` walks the (experiment, name, step) index
from one name to the next (a loose index scan) instead of reading every point to find the
distinct names.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import Double, Select, cast, func, select, text
from sqlalchemy.dialects.postgresql import array
from sqlalchemy.orm import Session

from core.downsample import Buckets, Point
from core.models import Experiment, MetricPointRow

P = MetricPointRow
_IN_CHUNK = 5000
"""Steps per ``IN`` list when reading the kept points back (PostgreSQL takes at most 65535 bound
parameters in one statement)."""


@dataclass(frozen=True)
class Sample:
    """One series as a chart gets it: the kept points and how many the series holds."""

    name: str
    total_points: int
    points: list[Point]


@dataclass(frozen=True)
class _Pick:
    """What the database found in one bucket: the steps of its lowest and highest finite point
    (None when no value is finite) and of its first point, and how many points it holds."""

    low: int | None
    high: int | None
    first: int
    points: int

    def steps(self) -> tuple[int, ...]:
        if self.low is None or self.high is None:
            return (self.first,)
        return (self.low, self.high)


class SeriesRepository:
    """Read-only SQL over ``metric_points`` by (experiment, name)."""

    def __init__(self, session: Session) -> None:
        self.session = session

    @property
    def _dialect(self) -> str:
        return self.session.get_bind().dialect.name

    def existing(self, experiment_ids: Sequence[str], project_id: str) -> set[str]:
        """Which of these experiments exist in the project."""
        query = select(Experiment.id).where(
            Experiment.id.in_(list(experiment_ids)), Experiment.project_id == project_id
        )
        return set(self.session.scalars(query))

    def names(self, experiment_id: str) -> list[str]:
        """Every metric name the experiment has points of, in order: one index probe per name
        (a recursive query that asks for the first name after the previous one)."""

        def after(previous: object) -> Select[str]:
            query = select(P.name).where(P.experiment_id == experiment_id)
            if previous is not None:
                query = query.where(P.name > previous)
            return query.order_by(P.name).limit(1)

        seed = select(after(None).scalar_subquery().label("name")).cte("names", recursive=True)
        found = seed.union_all(
            select(after(seed.c.name).scalar_subquery()).where(seed.c.name.is_not(None))
        )
        return list(self.session.scalars(select(found.c.name).where(found.c.name.is_not(None))))

    def points(self, experiment_id: str, name: str) -> list[Point]:
        """The whole series ``name`` of the experiment, ordered by step."""
        return self._read(self._series(experiment_id, name).order_by(P.step))

    def sample(self, experiment_id: str, names: Sequence[str], max_points: int) -> list[Sample]:
        """Each of ``names`` that has points, shrunk to at most ``max_points`` by the buckets of
        ``core.downsample``; a series of at most ``max_points`` comes back whole."""
        samples: dict[str, Sample] = {}
        long: dict[str, tuple[Point, Point, Buckets]] = {}
        for name in names:
            head = self._read(
                self._series(experiment_id, name).order_by(P.step).limit(max_points + 1)
            )
            if len(head) <= max_points:
                if head:
                    samples[name] = Sample(name, len(head), head)
                continue
            tail = self._read(self._series(experiment_id, name).order_by(P.step.desc()).limit(1))
            buckets = Buckets.between(head[0].step, tail[0].step, max_points)
            long[name] = (head[0], tail[0], buckets)
        picks = self._picks(experiment_id, {n: b for n, (_, _, b) in long.items()})
        for name, (first, last, _) in long.items():
            inner = sorted({s for pick in picks[name] for s in pick.steps()})
            kept = [first, *self._at(experiment_id, name, inner), last]
            total = 2 + sum(pick.points for pick in picks[name])
            samples[name] = Sample(name, total, kept)
        return [samples[n] for n in names if n in samples]

    def _series(self, experiment_id: str, name: str) -> Select[int, float | None, float]:
        return select(P.step, P.value, P.wall_time).where(
            P.experiment_id == experiment_id, P.name == name
        )

    def _read(self, query: Select[int, float | None, float]) -> list[Point]:
        return [
            Point(int(s), None if v is None else float(v), float(w))
            for s, v, w in self.session.execute(query)
        ]

    def _at(self, experiment_id: str, name: str, steps: list[int]) -> list[Point]:
        kept: list[Point] = []
        for start in range(0, len(steps), _IN_CHUNK):
            chunk = steps[start : start + _IN_CHUNK]
            query = self._series(experiment_id, name).where(P.step.in_(chunk)).order_by(P.step)
            kept.extend(self._read(query))
        return kept

    def _picks(self, experiment_id: str, long: dict[str, Buckets]) -> dict[str, list[_Pick]]:
        if not long:
            return {}
        if self._dialect == "postgresql":
            return _postgres_picks(self.session, experiment_id, long)
        return {n: _sqlite_picks(self.session, experiment_id, n, b) for n, b in long.items()}


def _postgres_picks(
    session: Session, experiment_id: str, long: dict[str, Buckets]
) -> dict[str, list[_Pick]]:
    """One pass over the points of every series that shares its first and last step (a run's
    metrics mostly do): a hash aggregate by (name, bucket). Points of one run are stored step by
    step, so reading one series reads most of the run's pages anyway."""
    shared: dict[tuple[int, int], list[str]] = defaultdict(list)
    for name, buckets in long.items():
        shared[(buckets.first, buckets.last)].append(name)
    picks: dict[str, list[_Pick]] = {n: [] for n in long}
    with _postgres_settings(session, jit="off", enable_sort="off"):
        for names in shared.values():
            buckets = long[names[0]]
            query = _postgres_buckets(experiment_id, names, buckets)
            for name, low, high, first, points in session.execute(query):
                low_step = None if low is None else buckets.first + int(low)
                high_step = None if high is None else buckets.first - int(high)
                picks[name].append(_Pick(low_step, high_step, int(first), int(points)))
    return picks


def _postgres_buckets(
    experiment_id: str, names: list[str], buckets: Buckets
) -> Select[str, float | None, float | None, int, int]:
    # min/max over [value, offset] arrays pick a value's point in the same pass: arrays compare
    # element by element, so equal values fall to the offset. The high's offset is negated, so both
    # take the earlier of equal points. Offsets from the first step stay exact in float8 (2^53).
    offset = cast(P.step - buckets.first, Double)
    finite = P.value.is_not(None)
    low = func.min(array([P.value, offset])).filter(finite)[2]
    high = func.max(array([P.value, -offset])).filter(finite)[2]
    bucket = (P.step - (buckets.first + 1)) // buckets.width
    return (
        select(P.name, low, high, func.min(P.step), func.count())
        .where(
            P.experiment_id == experiment_id,
            P.name.in_(names),
            P.step > buckets.first,
            P.step < buckets.last,
        )
        .group_by(P.name, bucket)
    )


@contextmanager
def _postgres_settings(session: Session, **settings: str) -> Iterator[None]:
    """Planner settings for this transaction only, restored afterwards. The planner cannot know
    how many buckets a computed bucket number makes (it assumes one per step), so it would sort
    millions of rows to group them and JIT-compile the plan for about half a second; a hash table
    of a few hundred buckets is what the query needs."""
    names = list(settings)
    before = [str(session.scalar(select(func.current_setting(n)))) for n in names]
    for name, value in settings.items():
        session.execute(select(func.set_config(name, value, True)))
    yield
    # Not on an error: the failed transaction cannot run statements, and ends with its settings.
    for name, value in zip(names, before, strict=True):
        session.execute(select(func.set_config(name, value, True)))


_SQLITE_BUCKETS = text(
    """
WITH RECURSIVE bucket(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM bucket WHERE k + 1 < :count)
SELECT
  (SELECT step FROM (SELECT step, min(value) FROM metric_points
                     WHERE {range} AND value IS NOT NULL)) AS low,
  (SELECT step FROM (SELECT step, max(value) FROM metric_points
                     WHERE {range} AND value IS NOT NULL)) AS high,
  (SELECT min(step) FROM metric_points WHERE {range}) AS first_step,
  (SELECT count(*) FROM metric_points WHERE {range}) AS points
FROM bucket
""".format(
        range="experiment_id = :experiment_id AND name = :name"
        " AND step >= :start + k * :width AND step < :start + (k + 1) * :width AND step < :last"
    )
)


def _sqlite_picks(session: Session, experiment_id: str, name: str, buckets: Buckets) -> list[_Pick]:
    """Per bucket, range scans of the (experiment, name, step) index: SQLite groups only by
    sorting, and the range scans need no sort. With a single min() or max(), SQLite takes the bare
    ``step`` from the row that holds it (the first such row in step order)."""
    rows = session.execute(
        _SQLITE_BUCKETS,
        {
            "experiment_id": experiment_id,
            "name": name,
            "count": buckets.count,
            "start": buckets.first + 1,
            "width": buckets.width,
            "last": buckets.last,
        },
    )
    return [
        _Pick(low, high, int(first), int(points))
        for low, high, first, points in rows
        if first is not None
    ]
