"""Population-based training end to end (``core.sweeps.pbt``): ``marlforge api`` (its sweep
scheduler decides each round) and torch workers as processes on PostgreSQL and Redis. The API is
restarted while round 0 trains (the new process decides round 1); a worker is killed with SIGKILL
in the middle of round 1, a fresh one takes the run over, and the search goes on; the bottom
member copies the top one's checkpoint, and the spec of its last run, without its ``init``, trains
the same weights bit for bit in one ordinary run."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from e2e_support import Api, free_port
from test_e2e_faults import Deployment, deployment, final_tensors, kill_hard

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

__all__ = ["deployment"]

ROUND = 1600


def _runs(deployment: Deployment, sweep_id: str) -> dict[str, dict[str, Any]]:
    items = deployment.api.http.get(
        "/v1/experiments", params={"sweep_id": sweep_id, "limit": 100}
    ).json()["items"]
    return {r["sweep_config"]: r for r in items}


def restart_api(deployment: Deployment) -> None:
    """Stop the API process and start another on a new port, as an operator's restart does."""
    deployment.api_process.stop(timeout=30)
    port = free_port()
    args = ["api", "--host", "127.0.0.1", "--port", str(port)]
    deployment.api_process = deployment._start(args, "api-2")
    key = deployment.api.key
    deployment.api.http.close()
    deployment.api = Api(f"http://127.0.0.1:{port}", key)
    deployment.api.wait_ready(process=deployment.api_process)


def _eval_at(deployment: Deployment, run_id: str, step: int) -> float:
    points = deployment.api.all_metrics(run_id)
    [value] = [
        p["value"] for p in points if p["name"] == "eval/episode_return" and p["step"] == step
    ]
    return float(value)


def test_a_pbt_search_survives_a_killed_worker_and_its_members_replay_bitwise(
    deployment: Deployment, tiny_spec: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    # Pendulum's episodes are 200 steps on each of 2 copies: rounds and checkpoints every 400
    # steps fall on episode boundaries, where continuing a checkpoint is exact.
    base = tiny_spec(
        total_steps=2 * ROUND,
        evaluation={"every_steps": 400, "episodes": 1},
        checkpoint={"every_steps": 400, "keep_last": 2},
    )
    base.pop("seed")
    body = {
        "name": "e2e pbt",
        "base": base,
        "space": {
            "random": {
                "hyperparameters.learning_rate_actor": {"log_uniform": [1e-4, 1e-2]},
                "hyperparameters.tau": {"uniform": [0.001, 0.05]},
            },
            "seed": 11,
        },
        "max_concurrent": 3,
        "search": {"method": "pbt", "population": 3, "round_steps": ROUND},
    }
    api = deployment.api
    worker = deployment.start_worker("worker-1")
    created = api.http.post("/v1/sweeps", json=body)
    assert created.status_code == 201, created.text
    sweep_id = created.json()["id"]
    assert [c["key"] for c in created.json()["configurations"]] == ["m0.r0", "m1.r0", "m2.r0"]

    # Restart the API while round 0 trains: the new process decides round 1 from the rows.
    deadline = time.monotonic() + 300
    while not any(r["status"] == "running" for r in _runs(deployment, sweep_id).values()):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    restart_api(deployment)
    api = deployment.api

    # Kill the worker while a run of round 1 is half way through its round.
    deadline = time.monotonic() + 300
    while True:
        round_one = [r for k, r in _runs(deployment, sweep_id).items() if k.endswith(".r1")]
        busy = [r for r in round_one if r["status"] == "running"]
        if busy and busy[0]["progress"]["step"] >= ROUND + 400:
            break
        assert time.monotonic() < deadline, round_one
        time.sleep(0.1)
    killed = busy[0]["id"]
    kill_hard(worker)
    deployment.start_worker("worker-2")

    deadline = time.monotonic() + 300
    while (sweep := api.http.get(f"/v1/sweeps/{sweep_id}").json())["status"] == "running":
        assert time.monotonic() < deadline, sweep["runs"]
        time.sleep(0.3)
    assert sweep["status"] == "succeeded", sweep["runs"]
    assert sweep["proposing"] is False and sweep["runs"]["succeeded"] == 6
    runs = _runs(deployment, sweep_id)
    lost = api.http.get(f"/v1/experiments/{killed}/timeline").json()["items"]
    assert any("lost at step" in (t["reason"] or "") for t in lost), lost
    assert api.get(killed)["restarts"] == 1

    # The lineage: the worst member of round 0 continues the best one's checkpoint.
    configs = {c["key"]: c for c in sweep["configurations"]}
    scores = {m: _eval_at(deployment, runs[f"m{m}.r0"]["id"], ROUND) for m in range(3)}
    best, worst = max(scores, key=scores.__getitem__), min(scores, key=scores.__getitem__)
    exploited = [c for c in configs.values() if c["round"] == 1 and c["exploited"]]
    assert [c["member"] for c in exploited] == [worst]
    copy = exploited[0]
    assert copy["continues"] == f"m{best}.r0"
    for m in set(range(3)) - {worst}:
        assert configs[f"m{m}.r1"]["continues"] == f"m{m}.r0"
        assert configs[f"m{m}.r1"]["params"] == configs[f"m{m}.r0"]["params"]
    last = api.get(runs[copy["key"]]["id"])
    source = runs[f"m{best}.r0"]
    assert last["spec"]["init"]["experiment_id"] == source["id"]
    assert last["spec"]["init"]["what"] == "run"
    assert last["spec"]["seed"] == source["spec"]["seed"]
    [change] = last["spec"]["schedule"]
    assert change["at_step"] == ROUND
    assert {f"hyperparameters.{k}": v for k, v in change["hyperparameters"].items()}.items() <= (
        copy["params"].items()
    )

    # The member's whole history as one run: the same spec without init.
    replay_spec = {**last["spec"], "name": "replay of the copied member", "init": None}
    replay = api.submit(replay_spec)
    api.wait_until(replay["id"], {"succeeded"}, timeout=300)
    expected = final_tensors(api, last["id"], tmp_path)
    replayed = final_tensors(api, replay["id"], tmp_path)
    assert set(replayed) == set(expected)
    assert [k for k in expected if not np.array_equal(replayed[k], expected[k])] == []
    # So does the killed run's member, taken over mid-round.
    killed_run = api.get(killed)
    again = api.submit({**killed_run["spec"], "name": "replay of the killed", "init": None})
    api.wait_until(again["id"], {"succeeded"}, timeout=300)
    expected = final_tensors(api, killed, tmp_path)
    replayed = final_tensors(api, again["id"], tmp_path)
    assert [k for k in expected if not np.array_equal(replayed[k], expected[k])] == []
