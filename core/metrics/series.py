"""Whole metric series of several runs, for charts and exports (``metric_points``).

A chart of a long series is shrunk in the database (the rule is ``core.metrics.downsample``'s): its
grid's buckets are merged from the series' summaries at the grid's tier (``metric_tiers``), at most
about ``FANOUT * MIN_MULTIPLE`` of them per bucket, or, when the buckets are narrower than twice the
finest tier, grouped from the points by SQL; the API reads each bucket's picks, never the series.
``names`` walks the (experiment, name, step) index from one name to the next (a loose index scan)
instead of reading every point to find the distinct names.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import Double, Select, cast, func, select, text
from sqlalchemy.dialects.postgresql import array
from sqlalchemy.orm import Session

from core.metrics.downsample import Grid, Point, tier_width
from core.metrics.tier_repository import TierRepository
from core.metrics.tiers import chart
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
        """Each of ``names`` that has points, shrunk to at most ``max_points`` by the grid of
        ``core.metrics.downsample``; a series of at most ``max_points`` comes back whole."""
        samples: dict[str, Sample] = {}
        from_points: dict[str, tuple[Grid, int, int]] = {}
        ends = TierRepository(self.session).ends(experiment_id, names)
        for name, (total, first, last) in ends.items():
            if total <= max_points:
                whole = self._read(self._series(experiment_id, name).order_by(P.step))
                samples[name] = Sample(name, len(whole), whole)
                continue
            grid = Grid.of(first, last, max_points)
            if grid.tier:
                samples[name] = self._from_tiers(experiment_id, name, total, first, last, grid)
            else:
                from_points[name] = (grid, first, last)
        for name, picks in self._picks(experiment_id, from_points).items():
            steps = sorted({s for pick in picks for s in pick.steps()})
            total = sum(pick.points for pick in picks)
            samples[name] = Sample(name, total, self._at(experiment_id, name, steps))
        return [samples[n] for n in names if n in samples]

    def _from_tiers(
        self, experiment_id: str, name: str, total: int, first: int, last: int, grid: Grid
    ) -> Sample:
        """The grid's buckets merged from the series' summaries at the grid's tier, and its
        first and last point."""
        width = tier_width(grid.tier)
        rows = TierRepository(self.session).rows(
            experiment_id, name, grid.tier, first // width, last // width
        )
        picks, _ = chart(rows, grid.width // width)
        kept = {p.step: p for p in self._at(experiment_id, name, [first, last])}
        kept.update((p.step, p) for p in picks)
        return Sample(name, total, [kept[s] for s in sorted(kept)])

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

    def _picks(
        self, experiment_id: str, long: dict[str, tuple[Grid, int, int]]
    ) -> dict[str, list[_Pick]]:
        if not long:
            return {}
        if self._dialect == "postgresql":
            return _postgres_picks(self.session, experiment_id, long)
        return {n: _sqlite_picks(self.session, experiment_id, n, *b) for n, b in long.items()}


def _postgres_picks(
    session: Session, experiment_id: str, long: dict[str, tuple[Grid, int, int]]
) -> dict[str, list[_Pick]]:
    """One pass over the points of every series that shares its grid (a run's metrics mostly
    do): a hash aggregate by (name, bucket)."""
    shared: dict[int, list[str]] = defaultdict(list)
    for name, (grid, _, _) in long.items():
        shared[grid.width].append(name)
    picks: dict[str, list[_Pick]] = {n: [] for n in long}
    with _postgres_settings(session, jit="off", enable_sort="off"):
        for width, names in shared.items():
            query = _postgres_buckets(experiment_id, names, width)
            for name, low, high, first, points in session.execute(query):
                low_step = None if low is None else int(low)
                high_step = None if high is None else -int(high)
                picks[name].append(_Pick(low_step, high_step, int(first), int(points)))
    return picks


def _postgres_buckets(
    experiment_id: str, names: list[str], width: int
) -> Select[str, float | None, float | None, int, int]:
    # min/max over [value, step] arrays pick a value's point in the same pass: arrays compare
    # element by element, so equal values fall to the step. The high's step is negated, so both
    # take the earlier of equal points. Steps stay exact in float8 (below 2^53).
    step = cast(P.step, Double)
    finite = P.value.is_not(None)
    low = func.min(array([P.value, step])).filter(finite)[2]
    high = func.max(array([P.value, -step])).filter(finite)[2]
    return (
        select(P.name, low, high, func.min(P.step), func.count())
        .where(P.experiment_id == experiment_id, P.name.in_(names))
        .group_by(P.name, P.step // width)
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
        " AND step >= :start + k * :width AND step < :start + (k + 1) * :width"
    )
)


def _sqlite_picks(
    session: Session, experiment_id: str, name: str, grid: Grid, first: int, last: int
) -> list[_Pick]:
    """Per bucket, range scans of the (experiment, name, step) index: SQLite groups only by
    sorting, and the range scans need no sort. With a single min() or max(), SQLite takes the bare
    ``step`` from the row that holds it (the first such row in step order)."""
    rows = session.execute(
        _SQLITE_BUCKETS,
        {
            "experiment_id": experiment_id,
            "name": name,
            "count": grid.index(last) - grid.index(first) + 1,
            "start": grid.index(first) * grid.width,
            "width": grid.width,
        },
    )
    return [
        _Pick(low, high, int(first), int(points))
        for low, high, first, points in rows
        if first is not None
    ]
