"""``/v1/metrics``: the metric series of several runs at once, shrunk for charts, or as CSV."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from typing import Annotated, Literal

from fastapi import Query
from fastapi.responses import StreamingResponse
from starlette.responses import Response

from api.auth import PrincipalDep, project_router
from api.deps import SessionDep
from api.errors import ApiError, FieldProblem, error_responses
from api.schemas.metrics import Series, SeriesSet
from core.experiments.event_stream import EventStreamRepository
from core.ids import ID_PATTERN, is_id
from core.metrics.series import Sample, SeriesRepository
from learners.api import NO_NUL

router = project_router("/v1", ["metrics"])

MAX_EXPERIMENTS = 20
_ID = ID_PATTERN.strip("^$")
DEFAULT_MAX_POINTS = 500


def _split(text: str | None) -> list[str]:
    return list(dict.fromkeys(p.strip() for p in (text or "").split(",") if p.strip()))


def _bad(field: str, reason: str) -> ApiError:
    return ApiError(
        422, "invalid_request", f"{field}: {reason}", [FieldProblem(field=field, reason=reason)]
    )


def _experiment_ids(text: str) -> list[str]:
    named = text.split(",")
    ids = list(dict.fromkeys(named))
    if len(named) > MAX_EXPERIMENTS:
        raise _bad("experiment_ids", f"at most {MAX_EXPERIMENTS} experiments at once")
    malformed = [i for i in ids if not is_id(i)]
    if malformed:
        shown = ", ".join(repr(i) for i in malformed)
        raise _bad("experiment_ids", f"not experiment ids: {shown} (comma-separated, no spaces)")
    return ids


def _names(repo: SeriesRepository, experiment_id: str, names: list[str]) -> list[str]:
    # Named series are looked up one by one (an absent one reads nothing); otherwise the index
    # lists the experiment's names.
    return sorted(names or repo.names(experiment_id))


def _load(
    session: SessionDep, project_id: str, ids: list[str], names: list[str], limit: int | None
) -> tuple[list[tuple[str, Sample]], dict[str, int]]:
    repo = SeriesRepository(session)
    found = repo.existing(ids, project_id)
    missing = [i for i in ids if i not in found]
    if missing:
        raise ApiError(
            404,
            "not_found",
            f"no experiment with id {', '.join(missing)}",
            [FieldProblem(field="experiment_ids", reason=f"unknown: {', '.join(missing)}")],
        )
    # Cursors first: a point committed after them arrives on the stream as well.
    cursors = EventStreamRepository(session).latest_ids(ids)
    rows: list[tuple[str, Sample]] = []
    for experiment_id in ids:
        wanted = _names(repo, experiment_id, names)
        if limit is not None:
            rows.extend((experiment_id, s) for s in repo.sample(experiment_id, wanted, limit))
            continue
        for name in wanted:
            points = repo.points(experiment_id, name)
            if points:
                rows.append((experiment_id, Sample(name, len(points), points)))
    return rows, {i: cursors.get(i, 0) for i in ids}


def _csv(rows: list[tuple[str, Sample]]) -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["experiment_id", "name", "step", "value", "wall_time"])
    for experiment_id, sample in rows:
        for p in sample.points:
            writer.writerow(
                [
                    experiment_id,
                    sample.name,
                    p.step,
                    "" if p.value is None else repr(p.value),
                    repr(p.wall_time),
                ]
            )
            if buffer.tell() > 1 << 16:
                yield buffer.getvalue()
                buffer.seek(0)
                buffer.truncate()
    yield buffer.getvalue()


@router.get(
    "/metrics",
    response_model=SeriesSet,
    summary="Metric series of several runs",
    description="For each run in `experiment_ids` and each metric in `names` (all when omitted), "
    "the series ordered by step. A series longer than `max_points` is shrunk in the database: it "
    "keeps its first and last point and splits its steps into buckets `step // width` of one "
    "width, at most `(max_points - 2) / 2` of them (the narrowest width that fits, rounded up to a "
    "whole number of the coarsest summary range that fits twice: 4^3 to 4^14 steps); each bucket "
    "keeps its lowest and its highest point in step order (the earlier of equal values), or its "
    "first point when none of its values is finite (a gap in the chart); an empty bucket keeps "
    "nothing. Spikes and dips survive, which taking every k-th point would lose. Buckets are "
    "merged from summaries written with the points, so the cost follows `max_points`, not the "
    "run's length. `total_points` counts the whole series. `format=csv` exports "
    "`experiment_id,name,step,value,wall_time` rows: every point unless `max_points` is given.",
    responses={
        200: {"content": {"text/csv": {}}, "description": "The series (JSON or CSV)."},
        **error_responses(404, 422),
    },
)
def read_series(
    session: SessionDep,
    principal: PrincipalDep,
    experiment_ids: Annotated[
        str,
        Query(
            json_schema_extra={"pattern": f"^{_ID}(,{_ID}){{0,{MAX_EXPERIMENTS - 1}}}$"},
            description=f"Comma-separated experiment ids (at most {MAX_EXPERIMENTS}).",
        ),
    ],
    names: Annotated[
        str | None,
        Query(max_length=4000, pattern=NO_NUL, description="Comma-separated metric names."),
    ] = None,
    max_points: Annotated[
        int | None, Query(ge=4, le=100_000, description="Points per series at most (default 500).")
    ] = None,
    format: Annotated[Literal["json", "csv"], Query(description="`json` or `csv`.")] = "json",
) -> Response | SeriesSet:
    ids = _experiment_ids(experiment_ids)
    limit = max_points
    if limit is None and format == "json":
        limit = DEFAULT_MAX_POINTS
    rows, cursors = _load(session, principal.project_id, ids, _split(names), limit)
    if format == "csv":
        return StreamingResponse(
            _csv(rows),
            media_type="text/csv; charset=utf-8",
            headers={"content-disposition": 'attachment; filename="metrics.csv"'},
        )
    return SeriesSet(
        series=[
            Series(
                experiment_id=e,
                name=s.name,
                total_points=s.total_points,
                steps=[p.step for p in s.points],
                values=[p.value for p in s.points],
            )
            for e, s in rows
        ],
        event_cursors=cursors,
    )
