"""Compaction (``core.retention``) on SQLite and PostgreSQL: what an old finished run keeps (its
timeline, checkpoints, status/checkpoint/log events with their ids, its 500-point charts exactly),
what it loses (progress and metrics events, the points of long series that no kept chart needs),
which runs are never touched, and that the work goes in bounded transactions that later calls
continue."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from retention_support import Db, DeleteCounter, RunShape, noisy
from sqlalchemy import select

from api.app import create_app
from api.routes.metrics import DEFAULT_MAX_POINTS
from core.db import utcnow
from core.dispatch.queue import CeleryDispatcher
from core.enums import EventKind, ExperimentStatus
from core.experiments import service as experiments
from core.experiments.checkpoints import CheckpointRepository
from core.experiments.events import EventRepository
from core.lifecycle import transition
from core.metrics.downsample import Point, min_max
from core.metrics.series import SeriesRepository
from core.models import Experiment
from core.retention.service import CHART_POINTS, CompactionReport, Compactor, compact
from core.settings import Settings
from core.storage import ArtifactStorage
from marlforge.cli import build_parser, cmd_compact
from tests.auth_support import bearer, new_key

pytestmark = pytest.mark.integration

S = ExperimentStatus
ROOT = Path(__file__).resolve().parents[2]
KEPT_KINDS = {EventKind.STATUS, EventKind.CHECKPOINT, EventKind.LOG}


def kept_by_rule(points: list[Point], max_points: int) -> list[Point]:
    """The oracle: the chart rule's picks at the dashboard's size and at the rest of the budget."""
    picks = min_max(points, max_points - CHART_POINTS) + min_max(points, CHART_POINTS)
    return sorted({p.step: p for p in picks}.values(), key=lambda p: p.step)


def stored(db: Db, run: str) -> dict[str, Any]:
    """Everything of the run that compaction may touch, as plain values."""
    with db.sessions() as session:
        events = EventRepository(session)
        series = SeriesRepository(session)
        return {
            "events": [(e.id, e.kind, e.payload) for e in events.events(run, limit=10**6)],
            "timeline": [
                (t.from_status, t.to_status, t.reason, t.created_at)
                for t in events.transitions(run)
            ],
            "checkpoints": [
                (c.id, c.step, c.sha256) for c in CheckpointRepository(session).all_of(run)
            ],
            "points": {n: series.points(run, n) for n in series.names(run)},
            "compacted_at": session.scalar(
                select(Experiment.compacted_at).where(Experiment.id == run)
            ),
        }


def api_reads(db: Db, settings: Settings, run: str) -> dict[str, Any]:
    """What the API answers about the run: charts at several sizes, timeline, checkpoints,
    events, the run."""
    app = create_app(
        settings, session_factory=db.sessions, storage=ArtifactStorage(settings.artifacts_dir)
    )
    reads: dict[str, Any] = {}
    with TestClient(app) as client:
        client.headers.update(bearer(new_key(db.sessions, settings)))
        for size in (None, CHART_POINTS, 100, 2000):
            params: dict[str, Any] = {"experiment_ids": run}
            if size is not None:
                params["max_points"] = size
            body = client.get("/v1/metrics", params=params).json()
            reads[f"chart {size}"] = {s["name"]: (s["steps"], s["values"]) for s in body["series"]}
        for path in ("timeline", "checkpoints", "events?format=json&limit=5000", ""):
            reads[path] = client.get(f"/v1/experiments/{run}/{path}".rstrip("/")).json()
    return reads


def test_an_old_finished_run_keeps_its_timeline_checkpoints_kept_events_and_charts(
    db: Db, settings: Settings, new_run: Callable[[RunShape], str]
) -> None:
    series = {
        "train/episode_return": noisy(1, 50_000),
        "learner/loss": [Point(10 * k, float(k % 97), 1.7e9 + k) for k in range(12_000)],
        "eval/episode_return": noisy(2, 300),
    }
    old = new_run(RunShape(series, reports=300))
    running = new_run(RunShape({"learner/loss": noisy(3, 12_000)}, status=S.RUNNING))
    cancelling = new_run(RunShape({"learner/loss": noisy(4, 11_000)}, status=S.CANCELLING))
    recent = new_run(RunShape({"learner/loss": noisy(5, 11_000)}, finished_days_ago=29))
    before = {run: stored(db, run) for run in (old, running, cancelling, recent)}
    api_before = api_reads(db, settings, old)

    report = compact(db.sessions, settings)

    after = stored(db, old)
    assert report.compacted == [old] and report.finished
    assert report.events_deleted == 600
    assert [e for e in before[old]["events"] if e[1] in KEPT_KINDS] == after["events"]
    assert {kind for _, kind, _ in after["events"]} == KEPT_KINDS
    assert after["timeline"] == before[old]["timeline"] and len(after["timeline"]) == 3
    assert after["checkpoints"] == before[old]["checkpoints"] and len(after["checkpoints"]) == 6
    for name, points in series.items():
        assert before[old]["points"][name] == points
        expected = kept_by_rule(points, 10_000) if len(points) > 10_000 else points
        assert after["points"][name] == expected, name
        assert len(after["points"][name]) <= 10_000
    thinned = after["points"]["train/episode_return"]
    assert {1e6, -1e6, None} <= {p.value for p in thinned}
    assert thinned[0] == series["train/episode_return"][0]
    assert thinned[-1] == series["train/episode_return"][-1]
    assert report.points_deleted == sum(len(series[n]) - len(after["points"][n]) for n in series)
    assert after["compacted_at"] is not None
    for run in (running, cancelling, recent):
        assert stored(db, run) == before[run], "a run not due was touched"

    api_after = api_reads(db, settings, old)
    for key in ("chart None", f"chart {CHART_POINTS}", "timeline", "checkpoints"):
        assert api_after[key] == api_before[key], key
    for size in (100, 2000):  # other sizes: stored points, and the series' extremes still show
        for name, (steps, values) in api_after[f"chart {size}"].items():
            original = {p.step: p.value for p in series[name]}
            assert all(original[s] == v for s, v in zip(steps, values, strict=True))
            finite = [v for v in original.values() if v is not None]
            assert {min(finite), max(finite)} <= set(values)
    page = api_after["events?format=json&limit=5000"]
    assert [e["id"] for e in page["items"]] == [e[0] for e in after["events"]]
    assert page["finished"] and page["status"] == "succeeded"
    assert api_after[""]["compacted_at"] is not None and api_before[""]["compacted_at"] is None

    again = compact(db.sessions, settings)
    assert (again.compacted, again.events_deleted, again.points_deleted) == ([], 0, 0)
    assert stored(db, old) == after


@pytest.mark.parametrize("status", [S.FAILED, S.CANCELLED])
def test_failed_and_cancelled_runs_are_compacted_and_a_short_history_only_loses_its_events(
    db: Db, settings: Settings, new_run: Callable[[RunShape], str], status: ExperimentStatus
) -> None:
    run = new_run(RunShape({"learner/loss": noisy(6, 800)}, reports=30, status=status))
    before = stored(db, run)

    report = compact(db.sessions, settings)

    after = stored(db, run)
    assert report.compacted == [run] and report.points_deleted == 0
    assert after["points"] == before["points"]
    assert after["events"] == [e for e in before["events"] if e[1] in KEPT_KINDS]


def test_small_batches_compact_several_runs_over_several_bounded_calls(
    db: Db, settings: Settings, new_run: Callable[[RunShape], str]
) -> None:
    settings = settings.model_copy(update={"retention_max_points": 1000})
    series = [{"a": noisy(10 + k, 3000), "b": noisy(20 + k, 1200)} for k in range(3)]
    runs = [new_run(RunShape(s, reports=120)) for s in series]
    deletes = DeleteCounter(db)

    reports: list[CompactionReport] = []
    while not (reports and reports[-1].finished):
        reports.append(compact(db.sessions, settings, batch_rows=50, max_transactions=7))
        assert len(reports) < 200

    assert len(reports) > 10 and not any(r.finished for r in reports[:-1])
    assert all(r.transactions <= 7 for r in reports)
    assert max(deletes.per_transaction) <= 50 + 1000  # a series' last stretch goes at once
    assert sorted(deletes.per_transaction).count(50) > 10
    assert sorted(run for r in reports for run in r.compacted) == sorted(runs)
    assert sum(r.events_deleted for r in reports) == 3 * 240
    for run, shape in zip(runs, series, strict=True):
        after = stored(db, run)
        assert after["points"] == {n: kept_by_rule(ps, 1000) for n, ps in shape.items()}
        assert {kind for _, kind, _ in after["events"]} == KEPT_KINDS
        assert after["compacted_at"] is not None


def test_a_resumed_run_is_left_alone_until_it_has_finished_and_aged_again(
    db: Db, settings: Settings, new_run: Callable[[RunShape], str]
) -> None:
    run = new_run(RunShape({"learner/loss": noisy(7, 12_000)}, reports=50, status=S.FAILED))
    first = compact(db.sessions, settings)
    first_at = stored(db, run)["compacted_at"]
    with db.sessions() as session:
        experiments.resume(session, CeleryDispatcher(settings), run)
        EventRepository(session).add(run, EventKind.PROGRESS, {"step": 1, "total_steps": 2})
        session.commit()
    later = utcnow() + dt.timedelta(days=100)
    assert compact(db.sessions, settings, now=later).compacted == []  # queued
    with db.sessions() as session:
        transition(session, run, [S.QUEUED], S.RUNNING, None)
        transition(session, run, [S.RUNNING], S.FAILED, "boom", finished_at=utcnow())
        session.commit()
    assert compact(db.sessions, settings).compacted == []  # finished just now

    again = compact(db.sessions, settings, now=later)

    assert first.compacted == again.compacted == [run]
    assert again.events_deleted == 1
    assert stored(db, run)["compacted_at"] > first_at


def test_a_retention_of_zero_days_compacts_nothing(
    db: Db, settings: Settings, new_run: Callable[[RunShape], str]
) -> None:
    run = new_run(RunShape({"learner/loss": noisy(8, 100)}, reports=10, finished_days_ago=999))
    before = stored(db, run)

    report = compact(db.sessions, settings.model_copy(update={"retention_days": 0}))

    assert report.finished and report.compacted == []
    assert stored(db, run) == before


def test_the_kept_chart_is_the_size_the_dashboard_and_the_api_draw() -> None:
    assert DEFAULT_MAX_POINTS == CHART_POINTS
    for page in ("run.js", "compare.js"):
        text = (ROOT / "api" / "static" / "js" / page).read_text()
        assert "max_points=" in text and text.count("max_points=") == text.count(
            f"max_points={CHART_POINTS}"
        ), page
    with pytest.raises(ValueError, match="retention_max_points"):
        Settings(retention_max_points=2 * CHART_POINTS - 1)


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_marlforge_compact_compacts_what_is_due_now(
    db: Db,
    settings: Settings,
    new_run: Callable[[RunShape], str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    old = new_run(RunShape({"learner/loss": noisy(9, 11_000)}, reports=20))
    recent = new_run(RunShape({"learner/loss": noisy(9, 11_000)}, finished_days_ago=1))

    assert cmd_compact(settings) == 0

    assert "compacted 1 run(s): 40 events and" in capsys.readouterr().out
    assert stored(db, old)["compacted_at"] is not None
    assert stored(db, recent)["compacted_at"] is None
    assert build_parser().parse_args(["compact"]).command == "compact"


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_the_api_process_compacts_in_the_background(
    db: Db, settings: Settings, new_run: Callable[[RunShape], str]
) -> None:
    run = new_run(RunShape({"learner/loss": noisy(10, 11_000)}, reports=20))
    settings = settings.model_copy(update={"retention_interval_s": 0.05})

    compactor = Compactor(db.sessions, settings).start()
    try:
        deadline = time.monotonic() + 60
        while stored(db, run)["compacted_at"] is None:
            assert time.monotonic() < deadline, "the background compaction never ran"
            time.sleep(0.05)
    finally:
        compactor.stop()

    assert len(stored(db, run)["points"]["learner/loss"]) <= 10_000
