"""A sweep with a model-based search (``search: {"method": "tpe"}``) over HTTP on the session's
PostgreSQL: checked whole at submission, its configurations proposed as room frees up under
``max_concurrent`` from the results the database holds, up to ``search.trials``; cancel stops the
proposals and resume takes them up again."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from core.db import utcnow
from core.dispatch.queue import CeleryDispatcher
from core.enums import ExperimentStatus
from core.lifecycle import transition
from core.models import Experiment, MetricPointRow, Sweep
from core.settings import Settings
from core.sweeps import proposals, scheduler, tpe

pytestmark = pytest.mark.integration

S = ExperimentStatus
Messages = Callable[[], list[dict[str, Any]]]
LR = "hyperparameters.learning_rate_actor"


def _tpe_sweep(example_spec: dict[str, Any], **changes: Any) -> dict[str, Any]:
    base = {k: v for k, v in example_spec.items() if k != "seed"}
    return {
        "name": "lr search",
        "base": base,
        "space": {"random": {LR: {"log_uniform": [1e-4, 1e-2]}}, "seed": 5},
        "seeds": 2,
        "max_concurrent": 2,
        "search": {"method": "tpe", "trials": 3, "startup_trials": 2},
        **changes,
    }


def _runs(client: TestClient, sweep_id: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = client.get(f"/v1/experiments?sweep_id={sweep_id}").json()["items"]
    return sorted(items, key=lambda r: r["id"])


def _succeed(session: Session, run_id: str, final: float) -> None:
    """What a worker does with a run: take it, report a final evaluation, end it."""
    assert transition(session, run_id, [S.QUEUED], S.RUNNING, "started", started_at=utcnow())
    session.add(
        MetricPointRow(
            experiment_id=run_id, step=1000, name="eval/episode_return", value=final, wall_time=0.0
        )
    )
    assert transition(session, run_id, [S.RUNNING], S.SUCCEEDED, "ended", finished_at=utcnow())
    session.commit()


def _stop_at_rung(session: Session, run_id: str, rung: int, value: float) -> None:
    """What a worker does with a run a rung stops: take it, report the rung's evaluation, end it
    ``succeeded`` at the rung, short of its budget."""
    assert transition(session, run_id, [S.QUEUED], S.RUNNING, "started", started_at=utcnow())
    session.add(
        MetricPointRow(
            experiment_id=run_id, step=rung, name="eval/episode_return", value=value, wall_time=0.0
        )
    )
    run = session.get(Experiment, run_id)
    assert run is not None
    run.step = rung
    assert transition(session, run_id, [S.RUNNING], S.SUCCEEDED, "stopped", finished_at=utcnow())
    session.commit()


def _advance(session: Session, settings: Settings, sweep_id: str) -> list[str]:
    return scheduler.advance(
        session, CeleryDispatcher(settings), sweep_id, 20, proposals.admission(settings)
    )


def test_a_search_proposes_configurations_as_room_frees_up_until_its_trials(
    client: TestClient,
    example_spec: dict[str, Any],
    session: Session,
    settings: Settings,
    queued_messages: Messages,
) -> None:
    response = client.post("/v1/sweeps", json=_tpe_sweep(example_spec))
    assert response.status_code == 201, response.text
    sweep = response.json()
    # Room for two runs: one configuration (two seeds) proposed, both runs queued.
    assert (sweep["status"], sweep["proposing"]) == ("running", True)
    assert [c["key"] for c in sweep["configurations"]] == ["c0"]
    runs = _runs(client, sweep["id"])
    assert [(r["sweep_config"], r["spec"]["seed"], r["status"]) for r in runs] == [
        ("c0", 0, "queued"), ("c0", 1, "queued"),
    ]  # fmt: skip
    lr0 = sweep["configurations"][0]["params"][LR]
    assert 1e-4 <= lr0 <= 1e-2
    assert runs[0]["spec"]["hyperparameters"]["learning_rate_actor"] == lr0
    assert _advance(session, settings, sweep["id"]) == []  # full: nothing proposed

    for run, final in zip(runs, (-300.0, -200.0), strict=True):
        _succeed(session, run["id"], final)
    started = _advance(session, settings, sweep["id"])
    assert len(started) == 2
    row = session.get(Sweep, sweep["id"])
    assert row is not None
    assert [c["key"] for c in row.configurations] == ["c0", "c1"]
    # c0 is a finished trial scored by the IQM of its seeds' finals; c1 runs.
    trials = proposals.trials(session, row)
    assert [t.state for t in trials] == [tpe.TrialState.COMPLETE, tpe.TrialState.RUNNING]
    assert trials[0].value == pytest.approx(-250.0)

    for run_id in started:
        _succeed(session, run_id, -100.0)
    last = _advance(session, settings, sweep["id"])
    assert len(last) == 2
    done = client.get(f"/v1/sweeps/{sweep['id']}").json()
    assert [c["key"] for c in done["configurations"]] == ["c0", "c1", "c2"]
    assert done["proposing"] is False  # three trials proposed
    for run_id in last:
        _succeed(session, run_id, -150.0)
    assert _advance(session, settings, sweep["id"]) == []
    done = client.get(f"/v1/sweeps/{sweep['id']}").json()
    assert (done["status"], done["runs"]["total"], done["runs"]["succeeded"]) == (
        "succeeded", 6, 6,
    )  # fmt: skip
    summary = client.get(f"/v1/sweeps/{sweep['id']}/summary").json()
    assert summary["configurations"][0]["key"] == "c1"  # the best, -100
    assert len(queued_messages()) == 6


def test_cancel_stops_the_proposals_and_resume_takes_them_up(
    client: TestClient, example_spec: dict[str, Any], session: Session, settings: Settings
) -> None:
    sweep_id = client.post("/v1/sweeps", json=_tpe_sweep(example_spec)).json()["id"]
    assert client.post(f"/v1/sweeps/{sweep_id}/cancel").status_code == 200
    cancelled = client.get(f"/v1/sweeps/{sweep_id}").json()
    assert (cancelled["status"], cancelled["proposing"]) == ("cancelled", False)
    assert _advance(session, settings, sweep_id) == []
    assert len(client.get(f"/v1/sweeps/{sweep_id}").json()["configurations"]) == 1

    assert client.post(f"/v1/sweeps/{sweep_id}/resume").status_code == 200
    resumed = client.get(f"/v1/sweeps/{sweep_id}").json()
    assert (resumed["status"], resumed["proposing"]) == ("running", True)
    assert resumed["runs"]["queued"] == 2  # the cancelled configuration's runs again


def test_with_early_stopping_a_configuration_stopped_at_a_rung_is_a_pruned_trial(
    client: TestClient, example_spec: dict[str, Any], session: Session, settings: Settings
) -> None:
    early = {"method": "asha", "rungs": [2000], "reduction_factor": 2}
    response = client.post("/v1/sweeps", json=_tpe_sweep(example_spec, early_stopping=early))
    assert response.status_code == 201, response.text
    sweep = response.json()
    for run, value in zip(_runs(client, sweep["id"]), (-700.0, -600.0), strict=True):
        _stop_at_rung(session, run["id"], 2000, value)
    row = session.get(Sweep, sweep["id"])
    assert row is not None
    [trial] = proposals.trials(session, row)
    assert (trial.state, trial.step) == (tpe.TrialState.PRUNED, 2000)
    assert trial.value == pytest.approx(-650.0)
    # The search goes on from it: the next configuration is proposed and its runs start.
    assert len(_advance(session, settings, sweep["id"])) == 2
    assert [c["key"] for c in client.get(f"/v1/sweeps/{sweep['id']}").json()["configurations"]] == [
        "c0", "c1",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"space": {"grid": {LR: [0.001]}, "random": {}}}, "space.grid"),
        (
            {"space": {"random": {LR: {"uniform": [0.001, 0.01]}}, "num_samples": 4}},
            "space.num_samples",
        ),
        ({"search": {"method": "tpe", "trials": 0}}, "search.trials"),
        ({"search": {"method": "bayes", "trials": 3}}, "search.method"),
    ],
)
def test_what_does_not_go_with_a_search_is_a_422_naming_the_field(
    client: TestClient, example_spec: dict[str, Any], changes: dict[str, Any], field: str
) -> None:
    before = client.get("/v1/sweeps").json()["items"]
    response = client.post("/v1/sweeps", json=_tpe_sweep(example_spec, **changes))
    assert response.status_code == 422, response.text
    assert field in [d["field"] for d in response.json()["error"]["fields"]], response.text
    assert client.get("/v1/sweeps").json()["items"] == before


def test_a_reachable_configuration_that_would_be_refused_refuses_the_sweep(
    client: TestClient, example_spec: dict[str, Any]
) -> None:
    """The search may propose any learning rate of the range: the range's end past the spec's
    bound is refused at submission, naming the path and the value."""
    changes = {"space": {"random": {LR: {"uniform": [0.001, 5.0]}}}}
    response = client.post("/v1/sweeps", json=_tpe_sweep(example_spec, **changes))
    assert response.status_code == 422, response.text
    details = response.json()["error"]["fields"]
    assert details[0]["field"] == f"space.random.{LR}"
    assert "value 5.0" in details[0]["reason"]
