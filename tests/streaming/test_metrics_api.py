"""``/v1/metrics`` (several runs, shrunk, CSV), ``/v1/algorithms`` and the status timeline."""

from __future__ import annotations

import csv
import io
import math
import time
from collections.abc import Callable, Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker
from stream_support import Run, db_events

from api.app import create_app
from core.enums import ExperimentStatus
from core.settings import Settings
from core.storage import FilesystemStore
from learners.hooks import MetricPoint
from tests.auth_support import bearer, new_key

S = ExperimentStatus
pytestmark = pytest.mark.integration
RETURN = "train/episode_return"


@pytest.fixture
def client(
    settings: Settings, sessions: sessionmaker[Session], storage: FilesystemStore
) -> Iterator[TestClient]:
    """The API on the module's database."""
    with TestClient(create_app(settings, session_factory=sessions, storage=storage)) as c:
        c.headers.update(bearer(new_key(sessions, settings)))
        yield c


def _write(run: Run, name: str, values: list[float]) -> None:
    now = time.time()
    run.hooks.metrics([MetricPoint(10 * (k + 1), now, name, v) for k, v in enumerate(values)])
    run.hooks.flush()


@pytest.fixture
def two_runs(start_run: Callable[..., Run]) -> tuple[Run, Run]:
    """Run A: 2000 returns with one spike and one dip, and 50 losses; run B: 30 returns."""
    a, b = start_run(), start_run()
    returns = [math.sin(k / 100) for k in range(2000)]
    returns[1234], returns[1500] = 1000.0, -1000.0
    _write(a, RETURN, returns)
    _write(a, "learner/loss", [1.0 / (k + 1) for k in range(50)])
    _write(b, RETURN, [float(k) for k in range(30)])
    return a, b


def test_series_of_several_runs_are_shrunk_keeping_their_extremes(
    client: TestClient, two_runs: tuple[Run, Run], sessions: sessionmaker[Session]
) -> None:
    a, b = two_runs
    body = client.get(
        "/v1/metrics", params={"experiment_ids": f"{b.id},{a.id}", "max_points": 100}
    ).json()

    series = {(s["experiment_id"], s["name"]): s for s in body["series"]}
    assert list(series) == [(b.id, RETURN), (a.id, "learner/loss"), (a.id, RETURN)]
    shrunk = series[(a.id, RETURN)]
    assert shrunk["total_points"] == 2000 and len(shrunk["steps"]) <= 100
    assert {1000.0, -1000.0} <= set(shrunk["values"])
    assert shrunk["steps"][0] == 10 and shrunk["steps"][-1] == 20000
    assert series[(b.id, RETURN)]["values"] == [float(k) for k in range(30)]
    assert body["event_cursors"] == {
        a.id: db_events(sessions, a.id)[-1][0],
        b.id: db_events(sessions, b.id)[-1][0],
    }


def test_names_select_series_and_the_default_is_500_points(
    client: TestClient, two_runs: tuple[Run, Run]
) -> None:
    a, _ = two_runs
    body = client.get("/v1/metrics", params={"experiment_ids": a.id, "names": RETURN}).json()
    assert [s["name"] for s in body["series"]] == [RETURN]
    assert 400 < len(body["series"][0]["steps"]) <= 500


def test_csv_exports_every_point_unless_asked_to_shrink(
    client: TestClient, two_runs: tuple[Run, Run]
) -> None:
    a, b = two_runs
    full = client.get("/v1/metrics", params={"experiment_ids": f"{a.id},{b.id}", "format": "csv"})
    shrunk = client.get(
        "/v1/metrics",
        params={"experiment_ids": a.id, "names": RETURN, "format": "csv", "max_points": 50},
    )

    assert full.status_code == 200 and full.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(full.text)))
    assert len(rows) == 2000 + 50 + 30
    spike = next(r for r in rows if r["experiment_id"] == a.id and r["step"] == "12350")
    assert spike["name"] == RETURN and float(spike["value"]) == 1000.0
    assert len(list(csv.DictReader(io.StringIO(shrunk.text)))) <= 50


def test_bad_metric_queries_name_their_field(client: TestClient, two_runs: tuple[Run, Run]) -> None:
    a, _ = two_runs
    unknown = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
    cases = [
        ({"experiment_ids": f"{a.id},{unknown}"}, 404, "experiment_ids"),
        ({"experiment_ids": "drop table"}, 422, "experiment_ids"),
        (
            {
                "experiment_ids": ",".join(
                    [a.id] * 1 + [unknown[:-2] + f"{k:02d}" for k in range(20)]
                )
            },
            422,
            "experiment_ids",
        ),
        ({"experiment_ids": a.id, "max_points": 2}, 422, "max_points"),
        ({"experiment_ids": a.id, "format": "xlsx"}, 422, "format"),
        ({}, 422, "experiment_ids"),
    ]
    for params, status, field in cases:
        response = client.get("/v1/metrics", params=params)
        assert response.status_code == status, (params, response.text)
        assert [f["field"] for f in response.json()["error"]["fields"]] == [field]


def test_the_timeline_lists_every_transition_with_its_reason(
    client: TestClient, start_run: Callable[..., Run]
) -> None:
    run = start_run()
    run.move(S.QUEUED, S.RUNNING, None)
    run.move(S.RUNNING, S.FAILED, "the critic diverged")

    timeline = client.get(f"/v1/experiments/{run.id}/timeline").json()["items"]
    missing = client.get("/v1/experiments/01ARZ3NDEKTSV4RRFFQ69G5FAV/timeline")

    assert [(t["from_status"], t["to_status"]) for t in timeline] == [
        (None, "queued"),
        ("queued", "running"),
        ("running", "failed"),
    ]
    assert timeline[-1]["reason"] == "the critic diverged"
    assert timeline[0]["at"] <= timeline[1]["at"] <= timeline[2]["at"]
    assert missing.status_code == 404


def test_the_catalogue_lists_environments_with_their_defaults(client: TestClient) -> None:
    catalogue = {a["algorithm"]: a for a in client.get("/v1/algorithms").json()}

    ippo = catalogue["ippo"]
    spread = next(e for e in ippo["environments"] if e["id"] == "simple_spread_v3")
    assert spread["suite"] == "mpe"
    # IPPO's per-environment default for MPE, not the class default of 128.
    assert spread["hyperparameter_defaults"]["rollout_length"] == 100
    assert ippo["hyperparameters"]["properties"]["rollout_length"]["default"] == 128
    assert ippo["hyperparameters"]["properties"]["clip_eps"]["description"]
    ddpg = catalogue["ddpg"]
    assert [e["id"] for e in ddpg["environments"]][:1] == ["Pendulum-v1"]
    assert "torch" in ddpg["backends"]
    assert set(ddpg["all_backends"]) == {"torch", "tensorflow", "mindspore"}
    # What a spec that leaves them out gets: the settings the tables were measured with.
    assert spread["env_defaults"] == {"num_envs": 8}
    tag = next(e for e in catalogue["maddpg"]["environments"] if e["id"] == "simple_tag_v3")
    assert tag["env_defaults"] == {"num_envs": 8, "kwargs": {"continuous_actions": True}}
    assert ddpg["environments"][0]["env_defaults"] == {}
