"""``/v1/sweeps`` over HTTP on the session's PostgreSQL: a sweep's runs are validated whole, stored
pending, started within ``max_concurrent`` (and the project's limit), cancelled and resumed
together, and summarised with statistics checked against hand-computed values."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.app import create_app
from core.db import utcnow
from core.dispatch.queue import CeleryDispatcher
from core.enums import ExperimentStatus
from core.lifecycle import transition
from core.models import Experiment, MetricPointRow, Project, Sweep
from core.quotas import run_memory_estimate
from core.settings import Settings
from core.sweeps import scheduler
from learners.admission.parse import parse_spec
from tests.auth_support import bearer

pytestmark = pytest.mark.integration

S = ExperimentStatus
Messages = Callable[[], list[dict[str, Any]]]


def _sweep(example_spec: dict[str, Any], **changes: Any) -> dict[str, Any]:
    base = {k: v for k, v in example_spec.items() if k != "seed"}
    return {
        "name": "lr study",
        "base": base,
        "space": {"grid": {"hyperparameters.learning_rate_actor": [0.001, 0.0003]}},
        "seeds": 3,
        "max_concurrent": 2,
        **changes,
    }


def _count(session: Session, model: type[Any]) -> int:
    """Rows of team-a only: other modules commit their own to the same database."""
    team = select(Project.id).where(Project.name == "team-a").scalar_subquery()
    return int(
        session.scalar(select(func.count()).select_from(model).where(model.project_id == team)) or 0
    )


def _runs(client: TestClient, sweep_id: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = client.get(f"/v1/experiments?sweep_id={sweep_id}").json()["items"]
    return sorted(items, key=lambda r: r["id"])


def _finish(session: Session, run_id: str, to: S = S.SUCCEEDED) -> None:
    """What a worker does with a run: take it, then end it."""
    assert transition(session, run_id, [S.QUEUED], S.RUNNING, "started", started_at=utcnow())
    assert transition(session, run_id, [S.RUNNING], to, "ended", finished_at=utcnow())
    session.commit()


def _advance(session: Session, settings: Settings, sweep_id: str, limit: int = 20) -> list[str]:
    return scheduler.advance(session, CeleryDispatcher(settings), sweep_id, limit)


def test_a_sweep_stores_every_run_and_starts_only_max_concurrent(
    client: TestClient, example_spec: dict[str, Any], queued_messages: Messages
) -> None:
    response = client.post("/v1/sweeps", json=_sweep(example_spec))

    assert response.status_code == 201, response.text
    sweep = response.json()
    assert response.headers["location"] == f"/v1/sweeps/{sweep['id']}"
    assert sweep["status"] == "running"
    assert sweep["runs"]["total"] == 6
    assert (sweep["runs"]["queued"], sweep["runs"]["pending"]) == (2, 4)
    assert [c["params"] for c in sweep["configurations"]] == [
        {"hyperparameters.learning_rate_actor": 0.001},
        {"hyperparameters.learning_rate_actor": 0.0003},
    ]
    assert sweep["seeds"] == [0, 1, 2]
    assert sweep["progress"]["total_steps"] == 6 * example_spec["total_steps"]
    runs = _runs(client, sweep["id"])
    assert [(r["sweep_config"], r["spec"]["seed"]) for r in runs] == [
        ("c0", 0), ("c1", 0), ("c0", 1), ("c1", 1), ("c0", 2), ("c1", 2),
    ]  # fmt: skip
    assert {r["sweep_id"] for r in runs} == {sweep["id"]}
    assert [r["status"] for r in runs] == ["queued"] * 2 + ["pending"] * 4
    assert runs[1]["spec"]["hyperparameters"]["learning_rate_actor"] == 0.0003
    assert runs[1]["name"] == "lr study c1 s0"
    # Only the two started runs reached the broker.
    assert sorted(m["args"][0] for m in queued_messages()) == [r["id"] for r in runs[:2]]


def test_slots_freed_by_ended_runs_start_the_next_pending_ones(
    client: TestClient,
    example_spec: dict[str, Any],
    session: Session,
    settings: Settings,
    queued_messages: Messages,
) -> None:
    sweep_id = client.post("/v1/sweeps", json=_sweep(example_spec)).json()["id"]
    runs = _runs(client, sweep_id)
    assert _advance(session, settings, sweep_id) == []  # full: nothing more starts

    _finish(session, runs[0]["id"])
    _finish(session, runs[1]["id"], S.FAILED)
    assert _advance(session, settings, sweep_id) == [runs[2]["id"], runs[3]["id"]]
    assert _advance(session, settings, sweep_id) == []
    assert len(queued_messages()) == 4
    for run in runs[2:4]:
        _finish(session, run["id"])
    assert _advance(session, settings, sweep_id) == [runs[4]["id"], runs[5]["id"]]
    for run in runs[4:]:
        _finish(session, run["id"])

    done = client.get(f"/v1/sweeps/{sweep_id}").json()
    assert done["status"] == "failed"  # one run failed; the others' results stand
    assert (done["runs"]["succeeded"], done["runs"]["failed"]) == (5, 1)


def test_the_projects_limit_of_active_runs_holds_for_sweeps_too(
    member_client_with: Callable[..., TestClient],
    example_spec: dict[str, Any],
    session: Session,
    settings: Settings,
) -> None:
    client = member_client_with(project_max_active_runs=3)
    solo = client.post("/v1/experiments", json=example_spec).json()
    sweep = client.post("/v1/sweeps", json=_sweep(example_spec, max_concurrent=5)).json()
    assert (sweep["runs"]["queued"], sweep["runs"]["pending"]) == (2, 4)
    pending = [r["id"] for r in _runs(client, sweep["id"]) if r["status"] == "pending"]

    assert _advance(session, settings, sweep["id"], limit=3) == []
    client.post(f"/v1/experiments/{solo['id']}/cancel")
    assert _advance(session, settings, sweep["id"], limit=3) == pending[:1]


def test_one_bad_run_refuses_the_whole_sweep_and_stores_nothing(
    client: TestClient, example_spec: dict[str, Any], session: Session, queued_messages: Messages
) -> None:
    before = (_count(session, Sweep), _count(session, Experiment))
    body = _sweep(example_spec)
    body["space"]["grid"]["hyperparameters.learning_rate_actor"] = [0.001, -1]

    response = client.post("/v1/sweeps", json=body)

    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_sweep"
    assert error["fields"] == [
        {
            "field": "space.grid.hyperparameters.learning_rate_actor",
            "reason": "value -1 in configuration c1: Input should be greater than 0",
        }
    ]
    assert (_count(session, Sweep), _count(session, Experiment)) == before
    assert queued_messages() == []


def test_runs_past_the_memory_budget_are_refused_like_a_single_spec(
    member_client_with: Callable[..., TestClient], example_spec: dict[str, Any], settings: Settings
) -> None:
    def need(num_envs: int) -> float:
        spec = parse_spec({**example_spec, "env": {**example_spec["env"], "num_envs": num_envs}})
        estimate = run_memory_estimate(spec, settings)
        assert estimate is not None
        return estimate.total_mib

    # A budget between what 1 env and 256 envs need: only the second configuration is over it.
    client = member_client_with(run_memory_mb=int((need(1) + need(256)) / 2))
    body = _sweep(example_spec, space={"grid": {"env.num_envs": [1, 256]}})

    response = client.post("/v1/sweeps", json=body)

    assert response.status_code == 422, response.text
    (field,) = response.json()["error"]["fields"]
    assert field["field"] == "base.backend"  # where the estimate puts a run that is too big
    assert field["reason"].startswith("with env.num_envs=256: the run would need about")


def test_a_sweep_too_large_is_refused_before_it_is_expanded(
    member_client_with: Callable[..., TestClient], example_spec: dict[str, Any]
) -> None:
    client = member_client_with(sweep_max_runs=10)
    body = _sweep(example_spec, seeds=100)

    response = client.post("/v1/sweeps", json=body)

    assert response.status_code == 422
    (field,) = response.json()["error"]["fields"]
    assert field["field"] == "space"
    assert "200 runs" in field["reason"] and "MARLFORGE_SWEEP_MAX_RUNS" in field["reason"]


def test_an_idempotency_key_makes_a_retry_safe(
    client: TestClient, example_spec: dict[str, Any], session: Session
) -> None:
    body = _sweep(example_spec)
    first = client.post("/v1/sweeps", json=body, headers={"idempotency-key": "study-1"})
    runs = _count(session, Experiment)
    again = client.post("/v1/sweeps", json=body, headers={"idempotency-key": "study-1"})
    other = client.post(
        "/v1/sweeps", json=_sweep(example_spec, seeds=2), headers={"idempotency-key": "study-1"}
    )
    used_for_runs = client.post(
        "/v1/experiments", json=example_spec, headers={"idempotency-key": "study-1"}
    )

    assert (first.status_code, again.status_code) == (201, 201)
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["idempotent-replayed"] == "true"
    assert _count(session, Experiment) == runs
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "idempotency_conflict"
    assert used_for_runs.status_code == 409
    assert "used to create sweeps, not experiments" in used_for_runs.json()["error"]["message"]


def test_a_sweep_counts_once_towards_the_submission_rate(
    member_client_with: Callable[..., TestClient], example_spec: dict[str, Any]
) -> None:
    client = member_client_with(project_submissions_per_minute=2)

    assert client.post("/v1/sweeps", json=_sweep(example_spec)).status_code == 201
    assert client.post("/v1/experiments", json=example_spec).status_code == 201
    over = client.post("/v1/sweeps", json=_sweep(example_spec))
    assert over.status_code == 429
    assert (
        "2 experiments, sweeps, matches or resumes in the last 60 s"
        in (over.json()["error"]["message"])
    )


def test_cancel_and_resume_apply_to_the_sweeps_runs(
    client: TestClient, example_spec: dict[str, Any], session: Session
) -> None:
    sweep_id = client.post("/v1/sweeps", json=_sweep(example_spec)).json()["id"]
    runs = _runs(client, sweep_id)
    _finish(session, runs[0]["id"])

    cancelled = client.post(f"/v1/sweeps/{sweep_id}/cancel")

    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    assert (cancelled.json()["runs"]["cancelled"], cancelled.json()["runs"]["succeeded"]) == (5, 1)
    resumed = client.post(f"/v1/sweeps/{sweep_id}/resume").json()
    assert (resumed["runs"]["queued"], resumed["runs"]["pending"]) == (2, 3)
    assert resumed["runs"]["succeeded"] == 1
    last = client.get(f"/v1/experiments/{runs[5]['id']}").json()
    assert last["status"] == "pending"
    assert last["status_reason"].startswith("resumed by ")


def test_a_sweep_run_resumed_alone_waits_for_its_sweeps_slot(
    client: TestClient, example_spec: dict[str, Any], session: Session, settings: Settings
) -> None:
    sweep_id = client.post("/v1/sweeps", json=_sweep(example_spec)).json()["id"]
    last = _runs(client, sweep_id)[-1]["id"]
    client.post(f"/v1/experiments/{last}/cancel")

    resumed = client.post(f"/v1/experiments/{last}/resume").json()

    assert resumed["status"] == "pending"
    assert "waits for a slot" in resumed["status_reason"]
    assert _advance(session, settings, sweep_id) == []  # two are queued already


def test_the_list_reads_sweeps_newest_first_with_a_cursor(
    client: TestClient, example_spec: dict[str, Any]
) -> None:
    ids = [
        client.post("/v1/sweeps", json=_sweep(example_spec, seeds=1)).json()["id"] for _ in range(3)
    ]

    first = client.get("/v1/sweeps?limit=2").json()
    second = client.get(f"/v1/sweeps?limit=2&after={first['next_after']}").json()

    assert [s["id"] for s in first["items"]] == ids[::-1][:2]
    assert ids[0] in [s["id"] for s in second["items"]]


def _write_finals(session: Session, run_ids: list[str], finals: list[float]) -> None:
    """Each run's eval/episode_return series: a first point at step 1000 and its final value at
    step 2000; then the run succeeded."""
    for run_id, final in zip(run_ids, finals, strict=True):
        for step, value in ((1000, final - 10.0), (2000, final)):
            session.add(
                MetricPointRow(
                    experiment_id=run_id,
                    step=step,
                    name="eval/episode_return",
                    value=value,
                    wall_time=0.0,
                )  # fmt: skip
            )
    session.commit()


def test_the_summary_ranks_configurations_with_hand_checked_statistics(
    client: TestClient, example_spec: dict[str, Any], session: Session, settings: Settings
) -> None:
    body = _sweep(example_spec, seeds=4, max_concurrent=12)
    body["space"]["grid"]["hyperparameters.learning_rate_actor"] = [0.001, 0.0003, 0.0001]
    sweep_id = client.post("/v1/sweeps", json=body).json()["id"]
    runs = _runs(client, sweep_id)
    by_config = {c: [r["id"] for r in runs if r["sweep_config"] == c] for c in ("c0", "c1", "c2")}
    # c0: one collapsed seed of four; c1: steady; c2: nothing finished yet.
    _write_finals(session, by_config["c0"], [-60.0, -12.0, -11.0, -10.0])
    _write_finals(session, by_config["c1"], [-14.0, -13.0, -13.0, -12.0])
    for run_id in by_config["c0"] + by_config["c1"]:
        _finish(session, run_id)

    summary = client.get(f"/v1/sweeps/{sweep_id}/summary").json()

    assert summary["metric"] == "eval/episode_return"
    assert summary["params"] == ["hyperparameters.learning_rate_actor"]
    assert summary["best"] == "c0"
    c0, c1, c2 = summary["configurations"]
    assert [c0["key"], c1["key"], c2["key"]] == ["c0", "c1", "c2"]
    assert (c0["rank"], c1["rank"], c2["rank"]) == (1, 2, None)
    # c0's IQM drops one score from each end of four: mean(-12, -11) = -11.5; its mean is -23.25.
    assert c0["final"]["iqm"] == pytest.approx(-11.5)
    assert c0["final"]["mean"] == pytest.approx(-23.25)
    assert sorted(c0["final"]["values"]) == [-60.0, -12.0, -11.0, -10.0]
    assert c1["final"]["iqm"] == pytest.approx(-13.0)
    low, high = c0["final"]["iqm_ci95"]
    assert -60.0 <= low <= -11.5 <= high <= -10.0
    # P(c0 > c1): c0's -60 beats none of c1's four runs, each of -12, -11, -10 beats all four
    # except that -12 ties c1's -12 (one half): (0 + 3.5 + 4 + 4) / 16.
    assert c1["improvement"]["best"] == "c0"
    assert c1["improvement"]["probability"] == pytest.approx(11.5 / 16)
    assert c0["improvement"] is None and c2["final"] is None
    assert (c2["runs"], c2["succeeded"], c2["active"]) == (4, 0, 4)
    # The curve: every run holds its value, the grid is the sweep's steps.
    assert [(p["step"], p["runs"]) for p in c0["curve"]] == [(1000, 4), (2000, 4)]
    assert c0["curve"][1]["mean"] == pytest.approx(-23.25)
    assert c2["curve"] == []

    exported = client.get(f"/v1/sweeps/{sweep_id}/summary.csv")
    assert exported.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(exported.text)))
    assert [r["config"] for r in rows] == ["c0", "c1", "c2"]
    assert rows[0]["hyperparameters.learning_rate_actor"] == "0.001"
    assert float(rows[0]["iqm"]) == pytest.approx(-11.5)
    assert float(rows[1]["p_best_better"]) == pytest.approx(11.5 / 16)
    assert rows[2]["rank"] == "" and rows[2]["iqm"] == ""


def test_another_metric_can_be_compared(
    client: TestClient, example_spec: dict[str, Any], session: Session
) -> None:
    sweep_id = client.post("/v1/sweeps", json=_sweep(example_spec, seeds=1)).json()["id"]

    summary = client.get(f"/v1/sweeps/{sweep_id}/summary?metric=train/episode_return").json()

    assert summary["metric"] == "train/episode_return"
    assert summary["best"] is None
    assert client.get(f"/v1/sweeps/{sweep_id}/summary?metric=").status_code == 422
    # PostgreSQL's text cannot hold NUL: refused before it reaches SQL (fuzzing found a 500).
    for route in ("summary", "summary.csv"):
        refused = client.get(f"/v1/sweeps/{sweep_id}/{route}", params={"metric": "a\x00b"})
        assert refused.status_code == 422
        assert [f["field"] for f in refused.json()["error"]["fields"]] == ["metric"]


def test_a_broker_outage_leaves_the_sweeps_runs_waiting_not_failed(
    settings: Settings,
    session_factory: Any,
    storage: Any,
    keys: dict[str, str],
    example_spec: dict[str, Any],
    session: Session,
) -> None:
    down = settings.model_copy(update={"broker_url": "redis://127.0.0.1:1/0"})
    app = create_app(down, session_factory=session_factory, storage=storage)
    with TestClient(app, headers=bearer(keys["member"])) as client:
        response = client.post("/v1/sweeps", json=_sweep(example_spec))
        # Stored whole and answered as created: its runs wait for the broker, none failed.
        assert response.status_code == 201, response.text
        sweep = client.get(f"/v1/sweeps/{response.json()['id']}").json()
        assert (sweep["runs"]["pending"], sweep["runs"]["failed"]) == (6, 0)
        first = _runs(client, sweep["id"])[0]
        timeline = client.get(f"/v1/experiments/{first['id']}/timeline").json()["items"]
        assert [(t["from_status"], t["to_status"]) for t in timeline] == [
            (None, "pending"), ("pending", "queued"), ("queued", "failed"), ("failed", "pending"),
        ]  # fmt: skip
        assert "the broker was unreachable" in timeline[-1]["reason"]

    # The broker is back: the next pass queues them.
    assert len(_advance(session, settings, sweep["id"])) == 2
