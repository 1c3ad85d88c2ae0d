"""The SQL of ``metric_tiers``: keeping a run's series summaries right as its points change, and
reading them for charts (``core.metrics.tiers``).

Every change to ``metric_points`` is followed, in its transaction, by one of two writes:

- ``append``: points after a series' last step (a worker's report, almost always) are merged into
  the summaries of their ranges at every tier by one upsert, without reading anything;
- ``refresh``: any other change (a step reported again, a resume's points forgotten, a
  compaction's points thinned) summarises the finest tier's ranges it touched again from the
  points, and each tier above from the one below, reading at most ``FANOUT - 1`` neighbouring
  summaries per tier besides those points.

Either way a tier row is always the summary of the points stored now.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Double,
    Insert,
    Integer,
    String,
    and_,
    bindparam,
    case,
    delete,
    func,
    insert,
    or_,
    select,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from core.metrics.downsample import BASE_TIER, FANOUT, TOP_TIER, Point, tier_width
from core.metrics.tiers import Summary, merge, roll_up
from core.models import MetricPointRow, MetricTierRow

T = MetricTierRow
REBUILD_POINTS = 500_000
"""About how many points ``rebuild`` summarises per pass."""

_ARRAY_TYPES: dict[str, Any] = {
    "experiment_id": String,
    "name": String,
    "tier": Integer,
    "bucket": BigInteger,
    "points": BigInteger,
    "first_step": BigInteger,
    "first_wall": Double,
    "last_step": BigInteger,
    "low_value": Double,
    "low_step": BigInteger,
    "low_wall": Double,
    "high_value": Double,
    "high_step": BigInteger,
    "high_wall": Double,
}
"""Every column of ``metric_tiers`` and its type, for PostgreSQL's arrays."""
_Ranges = dict[int, tuple[int, int | None]]
"""Per tier, the first and last bucket (None: no end) a refresh recomputes."""
_COLUMNS = (
    T.bucket,
    T.points,
    T.first_step,
    T.first_wall,
    T.last_step,
    T.low_value,
    T.low_step,
    T.low_wall,
    T.high_value,
    T.high_step,
    T.high_wall,
)


class TierRepository:
    """SQL over ``metric_tiers``; the caller commits."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def ends(self, experiment_id: str, names: Sequence[str]) -> dict[str, tuple[int, int, int]]:
        """Per name that has points: how many, and its first and last step (from the coarsest
        tier, a row or two per series)."""
        query = (
            select(T.name, func.sum(T.points), func.min(T.first_step), func.max(T.last_step))
            .where(T.experiment_id == experiment_id, T.tier == TOP_TIER, T.name.in_(list(names)))
            .group_by(T.name)
        )
        return {
            name: (int(total), int(first), int(last))
            for name, total, first, last in self.session.execute(query)
        }

    def rows(
        self, experiment_id: str, name: str, tier: int, first: int, last: int
    ) -> Iterable[Sequence[Any]]:
        """The summaries of buckets ``first`` to ``last`` of the series at ``tier`` as plain rows
        (``core.metrics.tiers.chart``'s), by bucket."""
        query = (
            select(*_COLUMNS)
            .where(
                T.experiment_id == experiment_id,
                T.name == name,
                T.tier == tier,
                T.bucket >= first,
                T.bucket <= last,
            )
            .order_by(T.bucket)
        )
        # Through the connection: the ORM's result adds a few microseconds a row.
        return self.session.connection().execute(query)

    def stored(
        self,
        experiment_id: str,
        series: Mapping[str, Sequence[Point]],
        ends: Mapping[str, tuple[int, int, int]],
    ) -> None:
        """Keep the summaries right after ``series`` (points in step order, per name) were stored;
        ``ends`` is what ``ends`` said before. Points after their series' last step are merged
        (``append``); any other change (a step reported again) is summarised again (``refresh``)."""
        after = {n: ps for n, ps in series.items() if n not in ends or ps[0].step > ends[n][2]}
        self.append(experiment_id, after)
        by_span: dict[tuple[int, int], list[str]] = defaultdict(list)
        for name, points in series.items():
            if name not in after:
                by_span[(points[0].step, points[-1].step)].append(name)
        for (low, high), names in by_span.items():
            self.refresh(experiment_id, names, low, high)

    def append(self, experiment_id: str, series: Mapping[str, Sequence[Point]]) -> None:
        """Merge points that all come after their series' last step into the summaries."""
        rows = []
        for name, points in series.items():
            for tier in range(BASE_TIER, TOP_TIER + 1):
                width = tier_width(tier)
                parts = [Summary.of_point(p.step // width, p) for p in points]
                rows += [_row(experiment_id, name, tier, s) for s in roll_up(parts, 1)]
        if not rows:
            return
        dialect = self.session.get_bind().dialect.name
        if dialect == "postgresql":
            # One statement over arrays: an executemany would run the upsert once per row.
            columns = {c: [row[c] for row in rows] for c in _ARRAY_TYPES}
            self.session.connection().execute(_merging(dialect), columns)
        else:
            self.session.execute(_merging(dialect), rows)

    def refresh(
        self, experiment_id: str, names: Sequence[str], first: int, last: int | None
    ) -> None:
        """Summarise again, at every tier, the ranges of ``names`` that hold steps ``first`` to
        ``last`` (None: to the end), from the points stored now."""
        if not names:
            return
        first = max(first, 0)
        names = sorted(set(names))
        recomputed: _Ranges = {
            t: (first // tier_width(t), None if last is None else last // tier_width(t))
            for t in range(BASE_TIER, TOP_TIER + 1)
        }
        fresh = {BASE_TIER: self._from_points(experiment_id, names, recomputed[BASE_TIER])}
        around = self._neighbours(experiment_id, names, recomputed)
        for tier in range(BASE_TIER + 1, TOP_TIER + 1):
            below = tier - 1
            fresh[tier] = {
                name: roll_up([*around[below].get(name, []), *fresh[below].get(name, [])], FANOUT)
                for name in names
            }
        self.session.execute(
            delete(T).where(
                T.experiment_id == experiment_id,
                T.name.in_(names),
                or_(*(_in(tier, span) for tier, span in recomputed.items())),
            )
        )
        rows = [
            _row(experiment_id, name, tier, s)
            for tier, by_name in fresh.items()
            for name, summaries in by_name.items()
            for s in summaries
        ]
        if rows:
            self.session.execute(insert(T), rows)

    def rebuild(self, experiment_id: str, names: Sequence[str]) -> None:
        """Summarise the whole of ``names`` again from their points (rows written another way
        than ``MetricRepository.write``: a migration, a benchmark's fill), a stretch at a time."""
        P = MetricPointRow
        low, high, count = self.session.execute(
            select(func.min(P.step), func.max(P.step), func.count()).where(
                P.experiment_id == experiment_id, P.name.in_(names)
            )
        ).one()
        self.session.execute(
            delete(T).where(T.experiment_id == experiment_id, T.name.in_(list(names)))
        )
        if low is None:
            return
        width = tier_width(BASE_TIER)
        span = int(high) - int(low) + 1
        stretch = max(width, span * REBUILD_POINTS // int(count) // width * width)
        for start in range(int(low) // width * width, int(high) + 1, stretch):
            self.refresh(experiment_id, names, start, start + stretch - 1)

    def _from_points(
        self, experiment_id: str, names: list[str], buckets: tuple[int, int | None]
    ) -> dict[str, list[Summary]]:
        width = tier_width(BASE_TIER)
        P = MetricPointRow
        query = select(P.name, P.step, P.value, P.wall_time).where(
            P.experiment_id == experiment_id, P.name.in_(names), P.step >= buckets[0] * width
        )
        if buckets[1] is not None:
            query = query.where(P.step < (buckets[1] + 1) * width)
        grouped: dict[str, dict[int, list[Summary]]] = defaultdict(lambda: defaultdict(list))
        for name, step, value, wall_time in self.session.execute(query):
            point = Point(int(step), None if value is None else float(value), float(wall_time))
            bucket = point.step // width
            grouped[name][bucket].append(Summary.of_point(bucket, point))
        return {
            name: [merge(b, parts) for b, parts in sorted(by_bucket.items())]
            for name, by_bucket in grouped.items()
        }

    def _neighbours(
        self, experiment_id: str, names: list[str], recomputed: _Ranges
    ) -> dict[int, dict[str, list[Summary]]]:
        """Per tier below the top, the stored summaries that share a parent with the recomputed
        ones but are not recomputed themselves (at most ``FANOUT - 1`` on each side)."""
        spans: list[ColumnElement[bool]] = []
        for tier in range(BASE_TIER, TOP_TIER):
            low, high = recomputed[tier]
            parent_low, parent_high = recomputed[tier + 1]
            if parent_low * FANOUT < low:
                spans.append(_in(tier, (parent_low * FANOUT, low - 1)))
            if high is None or parent_high is None:
                continue  # everything after ``low`` is recomputed
            if high < (parent_high + 1) * FANOUT - 1:
                spans.append(_in(tier, (high + 1, (parent_high + 1) * FANOUT - 1)))
        found: dict[int, dict[str, list[Summary]]] = defaultdict(lambda: defaultdict(list))
        if not spans:
            return found
        query = select(T.tier, T.name, *_COLUMNS).where(
            T.experiment_id == experiment_id, T.name.in_(names), or_(*spans)
        )
        for row in self.session.execute(query):
            found[int(row.tier)][row.name].append(_summary(row[2:]))
        return found


@functools.cache
def _merging(dialect: str) -> Insert:
    """The upsert ``append`` merges with: each column of a stored summary takes the new range's
    value where the new range's point is earlier, later, lower or higher (an earlier step of equal
    values stays). On PostgreSQL its rows come as one array per column (``_ARRAY_TYPES``)."""
    if dialect == "postgresql":
        arrays = [
            func.unnest(bindparam(c, type_=postgresql.ARRAY(t))).label(c)
            for c, t in _ARRAY_TYPES.items()
        ]
        statement: Any = postgresql.insert(T).from_select(list(_ARRAY_TYPES), select(*arrays))
    elif dialect == "sqlite":
        statement = sqlite.insert(T)
    else:
        raise RuntimeError(f"metric tier upserts are not written for the {dialect} dialect")
    new = statement.excluded
    earlier = new.first_step < T.first_step
    lower = and_(
        new.low_value.is_not(None),
        or_(
            T.low_value.is_(None),
            new.low_value < T.low_value,
            and_(new.low_value == T.low_value, new.low_step < T.low_step),
        ),
    )
    higher = and_(
        new.high_value.is_not(None),
        or_(
            T.high_value.is_(None),
            new.high_value > T.high_value,
            and_(new.high_value == T.high_value, new.high_step < T.high_step),
        ),
    )

    def pick(condition: ColumnElement[bool], column: str) -> ColumnElement[Any]:
        return case((condition, new[column]), else_=T.__table__.c[column])

    merged: dict[str, Any] = {
        "points": T.points + new.points,
        "last_step": pick(new.last_step > T.last_step, "last_step"),
    }
    for condition, columns in (
        (earlier, ("first_step", "first_wall")),
        (lower, ("low_value", "low_step", "low_wall")),
        (higher, ("high_value", "high_step", "high_wall")),
    ):
        merged.update({c: pick(condition, c) for c in columns})
    result: Insert = statement.on_conflict_do_update(
        index_elements=["experiment_id", "name", "tier", "bucket"], set_=merged
    )
    return result


def _in(tier: int, span: tuple[int, int | None]) -> ColumnElement[bool]:
    condition = and_(T.tier == tier, T.bucket >= span[0])
    return condition if span[1] is None else and_(condition, T.bucket <= span[1])


def _summary(row: Sequence[Any]) -> Summary:
    bucket, points, first, first_wall, last, *extremes = row
    low_value, low_step, low_wall, high_value, high_step, high_wall = extremes
    low = None if low_value is None else (float(low_value), int(low_step), float(low_wall))
    high = None if high_value is None else (float(high_value), int(high_step), float(high_wall))
    return Summary(int(bucket), int(points), (int(first), float(first_wall)), int(last), low, high)


def _row(experiment_id: str, name: str, tier: int, s: Summary) -> dict[str, object]:
    low = s.low or (None, None, None)
    high = s.high or (None, None, None)
    return {
        "experiment_id": experiment_id,
        "name": name,
        "tier": tier,
        "bucket": s.bucket,
        "points": s.points,
        "first_step": s.first[0],
        "first_wall": s.first[1],
        "last_step": s.last_step,
        "low_value": low[0],
        "low_step": low[1],
        "low_wall": low[2],
        "high_value": high[0],
        "high_step": high[1],
        "high_wall": high[2],
    }
