"""A PBT sweep (``search: {"method": "pbt"}``) over HTTP on the session's PostgreSQL: round 0 stored
at submission, each later round decided by the scheduler once the last one has ended (the worst
member continues the best one's checkpoint, its values explored), what cannot be searched refused
with the field. A worker's part is played by the test: it takes a run, writes its final
evaluation and checkpoint rows, and ends it."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from core.db import utcnow
from core.dispatch.queue import CeleryDispatcher
from core.enums import ExperimentStatus
from core.ids import new_id
from core.lifecycle import transition
from core.models import Checkpoint, Experiment, MetricPointRow
from core.settings import Settings
from core.sweeps import proposals, scheduler

pytestmark = pytest.mark.integration

S = ExperimentStatus
LR = "hyperparameters.learning_rate_actor"
ROUND = 2000


def _pbt_sweep(example_spec: dict[str, Any], **changes: Any) -> dict[str, Any]:
    base = {k: v for k, v in example_spec.items() if k != "seed"}
    return {
        "name": "pbt",
        "base": {**base, "total_steps": 2 * ROUND},
        "space": {
            "random": {LR: {"log_uniform": [1e-4, 1e-2]}, "hyperparameters.tau": {
                "uniform": [0.001, 0.05]}},
            "seed": 5,
        },
        "max_concurrent": 3,
        "search": {"method": "pbt", "population": 3, "round_steps": ROUND},
        **changes,
    }  # fmt: skip


def _runs(client: TestClient, sweep_id: str) -> dict[str, dict[str, Any]]:
    items = client.get(f"/v1/experiments?sweep_id={sweep_id}").json()["items"]
    return {r["sweep_config"]: r for r in items}


def _end(session: Session, run_id: str, step: int, final: float | None) -> str | None:
    """A worker's run: taken, then succeeded with an evaluation and a checkpoint at ``step`` (the
    checkpoint's id), or failed when ``final`` is None."""
    assert transition(session, run_id, [S.QUEUED], S.RUNNING, "started", started_at=utcnow())
    if final is None:
        assert transition(session, run_id, [S.RUNNING], S.FAILED, "boom", finished_at=utcnow())
        session.commit()
        return None
    checkpoint_id = new_id()
    session.add(
        MetricPointRow(
            experiment_id=run_id, step=step, name="eval/episode_return", value=final, wall_time=0.0
        )
    )
    session.add(
        Checkpoint(
            id=checkpoint_id, experiment_id=run_id, step=step, size_bytes=1, sha256="0" * 64,
            path=f"experiments/{run_id}/checkpoints/{step}.ckpt", created_at=utcnow(),
            eval_return=final,
        )
    )  # fmt: skip
    run = session.get(Experiment, run_id)
    assert run is not None
    run.step = step  # its progress, as a worker reports it
    assert transition(session, run_id, [S.RUNNING], S.SUCCEEDED, "ended", finished_at=utcnow())
    session.commit()
    return checkpoint_id


def _advance(session: Session, settings: Settings, sweep_id: str) -> list[str]:
    return scheduler.advance(
        session, CeleryDispatcher(settings), sweep_id, 20, proposals.admission(settings)
    )


def test_the_next_round_continues_the_best_checkpoint_for_the_worst_member(
    client: TestClient, example_spec: dict[str, Any], session: Session, settings: Settings
) -> None:
    response = client.post("/v1/sweeps", json=_pbt_sweep(example_spec))
    assert response.status_code == 201, response.text
    sweep = response.json()
    assert (sweep["status"], sweep["proposing"], sweep["seeds"]) == ("running", True, [5, 6, 7])
    configs = sweep["configurations"]
    assert [(c["key"], c["member"], c["round"], c["continues"]) for c in configs] == [
        ("m0.r0", 0, 0, None), ("m1.r0", 1, 0, None), ("m2.r0", 2, 0, None),
    ]  # fmt: skip
    runs = _runs(client, sweep["id"])
    assert {r["status"] for r in runs.values()} == {"queued"}
    assert [runs[f"m{m}.r0"]["spec"]["total_steps"] for m in range(3)] == [ROUND] * 3

    # Two of three ended: nothing is decided until the third has. Round 0 is ranked meanwhile.
    checkpoints = {0: _end(session, runs["m0.r0"]["id"], ROUND, -900.0)}
    checkpoints[1] = _end(session, runs["m1.r0"]["id"], ROUND, -200.0)
    assert _advance(session, settings, sweep["id"]) == []
    checkpoints[2] = _end(session, runs["m2.r0"]["id"], ROUND, -500.0)
    ranks = client.get(f"/v1/sweeps/{sweep['id']}/summary").json()["configurations"]
    assert [(c["key"], c["rank"]) for c in ranks] == [("m1.r0", 1), ("m2.r0", 2), ("m0.r0", 3)]
    started = _advance(session, settings, sweep["id"])
    assert len(started) == 3
    # Another pass (another API process, or one after a restart) decides nothing twice.
    assert _advance(session, settings, sweep["id"]) == []
    again = client.get(f"/v1/sweeps/{sweep['id']}").json()
    assert len(again["configurations"]) == 6 and again["runs"]["total"] == 6

    done = client.get(f"/v1/sweeps/{sweep['id']}").json()
    assert done["proposing"] is False  # two rounds: the last is stored
    # Three members' first rounds of their two trained: half the search's budget.
    assert (done["progress"]["step"], done["progress"]["total_steps"]) == (3 * ROUND, 6 * ROUND)
    round_one = {c["member"]: c for c in done["configurations"] if c["round"] == 1}
    assert round_one[0]["exploited"] is True and round_one[0]["continues"] == "m1.r0"
    assert round_one[0]["params"] != configs[1]["params"]
    for m in (1, 2):
        assert round_one[m]["exploited"] is False and round_one[m]["continues"] == f"m{m}.r0"
        assert round_one[m]["params"] == configs[m]["params"]
    runs = _runs(client, sweep["id"])
    copy = runs["m0.r1"]["spec"]
    assert copy["init"] == {
        "experiment_id": runs["m1.r0"]["id"], "checkpoint_id": checkpoints[1], "what": "run"
    }  # fmt: skip
    assert (copy["seed"], copy["total_steps"]) == (6, 2 * ROUND)
    [change] = copy["schedule"]
    assert change["at_step"] == ROUND
    assert change["hyperparameters"]["learning_rate_actor"] == round_one[0]["params"][LR]
    kept = runs["m2.r1"]["spec"]
    assert kept["init"]["experiment_id"] == runs["m2.r0"]["id"] and kept["schedule"] == []
    assert runs["m0.r1"]["parent"]["experiment_id"] == runs["m1.r0"]["id"]

    for m, final in ((0, -100.0), (1, -150.0), (2, -300.0)):
        _end(session, runs[f"m{m}.r1"]["id"], 2 * ROUND, final)
    assert _advance(session, settings, sweep["id"]) == []
    summary = client.get(f"/v1/sweeps/{sweep['id']}/summary").json()
    # The population as it stands: the last round ranked, the first listed unranked.
    assert [(c["key"], c["rank"]) for c in summary["configurations"]] == [
        ("m0.r1", 1), ("m1.r1", 2), ("m2.r1", 3),
        ("m0.r0", None), ("m1.r0", None), ("m2.r0", None),
    ]  # fmt: skip
    assert summary["best"] == "m0.r1"
    # Each round's curve is its member's whole history: m0 continued m1's checkpoint after round
    # 0, so its line runs through m1's round 0 and on with its own round 1.
    curves = {
        c["key"]: [(p["step"], p["mean"]) for p in c["curve"]] for c in summary["configurations"]
    }
    assert curves["m0.r1"] == [(ROUND, -200.0), (2 * ROUND, -100.0)]
    assert curves["m1.r1"] == [(ROUND, -200.0), (2 * ROUND, -150.0)]
    assert curves["m2.r1"] == [(ROUND, -500.0), (2 * ROUND, -300.0)]
    assert curves["m0.r0"][0] == (ROUND, -900.0)
    done = client.get(f"/v1/sweeps/{sweep['id']}").json()
    assert (done["status"], done["runs"]["succeeded"]) == ("succeeded", 6)
    assert done["progress"]["fraction"] == 1.0


def test_a_failed_member_is_replaced_and_an_all_failed_round_ends_the_search(
    client: TestClient, example_spec: dict[str, Any], session: Session, settings: Settings
) -> None:
    body = _pbt_sweep(example_spec, search={
        "method": "pbt", "population": 3, "round_steps": ROUND // 2, "quantile": 0.3})  # fmt: skip
    sweep_id = client.post("/v1/sweeps", json=body).json()["id"]
    runs = _runs(client, sweep_id)
    _end(session, runs["m0.r0"]["id"], ROUND // 2, -300.0)
    _end(session, runs["m1.r0"]["id"], ROUND // 2, None)
    _end(session, runs["m2.r0"]["id"], ROUND // 2, -200.0)
    assert len(_advance(session, settings, sweep_id)) == 3
    sweep = client.get(f"/v1/sweeps/{sweep_id}").json()
    exploited = {c["member"]: c["continues"] for c in sweep["configurations"] if c["exploited"]}
    assert exploited == {1: "m2.r0"}, "the failed member copies the best; the rest carry on"

    runs = _runs(client, sweep_id)
    for m in range(3):
        _end(session, runs[f"m{m}.r1"]["id"], ROUND, None)
    assert _advance(session, settings, sweep_id) == []
    sweep = client.get(f"/v1/sweeps/{sweep_id}").json()
    assert sweep["proposing"] is False and sweep["status"] == "failed"
    assert max(c["round"] for c in sweep["configurations"]) == 1


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        (
            {"space": {"random": {"hyperparameters.hidden_sizes": {"choice": [[32], [64]]}}}},
            "space.random.hyperparameters.hidden_sizes",
            "learning_rate_actor",
        ),
        ({"seeds": 2}, "seeds", "space.seed + its index"),
        (
            {"search": {"method": "pbt", "population": 3, "round_steps": 1500}},
            "search.round_steps",
            "whole number",
        ),
        ({"search": {"method": "pbt", "population": 1, "round_steps": ROUND}}, "search.population",
         "greater than or equal to 2"),
    ],
)  # fmt: skip
def test_what_pbt_cannot_search_is_a_422_naming_the_field(
    client: TestClient,
    example_spec: dict[str, Any],
    changes: dict[str, Any],
    field: str,
    words: str,
) -> None:
    response = client.post("/v1/sweeps", json=_pbt_sweep(example_spec, **changes))
    assert response.status_code == 422, response.text
    fields = {f["field"]: f["reason"] for f in response.json()["error"]["fields"]}
    assert field in fields and words in fields[field], fields
    assert client.get("/v1/sweeps").json()["items"] == []


def test_the_catalogue_lists_what_a_run_may_change(client: TestClient) -> None:
    catalogue = {a["algorithm"]: a for a in client.get("/v1/algorithms").json()}
    assert "learning_rate_actor" in catalogue["ddpg"]["mutable_hyperparameters"]
    assert "hidden_sizes" not in catalogue["ddpg"]["mutable_hyperparameters"]
    assert "learning_rate" in catalogue["mappo"]["mutable_hyperparameters"]
    assert "rollout_length" not in catalogue["mappo"]["mutable_hyperparameters"]
