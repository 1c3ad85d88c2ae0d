"""The deployed shape end to end: ``marlforge api`` and ``marlforge worker --backend torch`` as
processes on PostgreSQL and Redis; a DDPG spec is trained, cancelled, resumed and downloaded."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from e2e_support import RAN_TO_SUCCESS, Api

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.integration]


def _assert_ordered_without_duplicates(points: list[dict[str, Any]]) -> None:
    steps = [p["step"] for p in points]
    keys = [(p["step"], p["name"]) for p in points]
    assert steps == sorted(steps)
    assert len(keys) == len(set(keys))


def test_a_ddpg_run_trains_and_its_checkpoint_acts(
    stack: Api, tiny_spec: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    created = stack.submit(tiny_spec(total_steps=400))
    assert created["status"] == "queued"

    done = stack.wait_until(created["id"], {"succeeded"})

    assert stack.transitions(created["id"]) == RAN_TO_SUCCESS
    assert done["progress"] == {"step": 400, "total_steps": 400, "fraction": 1.0}
    assert done["started_at"] and done["finished_at"]
    points = stack.all_metrics(created["id"])
    _assert_ordered_without_duplicates(points)
    assert {"eval/episode_return", "learner/loss_critic"} <= {p["name"] for p in points}
    assert set(done["latest_metrics"]) == {p["name"] for p in points}

    checkpoints = stack.checkpoints(created["id"])
    assert [c["step"] for c in checkpoints] == [200, 400]
    latest = checkpoints[-1]
    response = stack.http.get(f"/v1/experiments/{created['id']}/checkpoints/{latest['id']}/file")
    assert response.status_code == 200
    assert hashlib.sha256(response.content).hexdigest() == latest["sha256"]
    assert response.headers["etag"] == f'"{latest["sha256"]}"'
    assert int(response.headers["content-length"]) == latest["size_bytes"]

    path = tmp_path / "policy.ckpt"
    path.write_bytes(response.content)
    _act_with(path, done["spec"])


def _act_with(path: Path, spec_json: dict[str, Any]) -> None:
    from learners.envs.factory import make_vec_env
    from learners.policy import load_policy
    from learners.spec import ExperimentSpec

    spec = ExperimentSpec.model_validate(spec_json)
    policy = load_policy(path)
    env = make_vec_env(spec.env, seed=11, workers=0)
    try:
        observation = env.reset(seed=11)
        actions = np.asarray(policy.act(observation))
        assert actions.shape == (spec.env.num_envs, 1, env.info.action_dim)
        assert np.all(np.isfinite(actions))
        env.step(actions)
    finally:
        env.close()


def test_cancel_a_running_and_a_queued_run_then_resume(
    stack: Api, tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    running = stack.submit(tiny_spec(total_steps=1600, name="long"))
    stack.wait_until(running["id"], {"running"}, min_step=200)
    queued = stack.submit(tiny_spec(total_steps=400, name="behind"))
    # One worker, one job at a time: the second waits in the queue.
    assert stack.get(queued["id"])["status"] == "queued"

    cancelled_queued = stack.http.post(f"/v1/experiments/{queued['id']}/cancel").json()
    cancelling = stack.http.post(f"/v1/experiments/{running['id']}/cancel").json()
    stopped = stack.wait_until(running["id"], {"cancelled"})

    assert cancelled_queued["status"] == "cancelled"
    assert cancelling["status"] in {"cancelling", "cancelled"}
    step = stopped["progress"]["step"]
    assert 200 <= step < 1600
    assert stack.checkpoints(running["id"])[-1]["step"] == step

    resumed = stack.http.post(f"/v1/experiments/{running['id']}/resume").json()
    assert resumed["status"] == "queued"
    me = stack.http.get("/v1/whoami").json()["key"]
    by = f"by key {me['name']!r} ({me['id']})"
    assert resumed["status_reason"] == f"resumed {by} from the checkpoint at step {step}"
    # The timeline keeps which key asked for each change; the worker's own changes name none.
    timeline = stack.http.get(f"/v1/experiments/{running['id']}/timeline").json()["items"]
    actors = {(t["to_status"], t["actor_key_id"]) for t in timeline}
    assert {("queued", me["id"]), ("cancelling", me["id"]), ("running", None)} <= actors
    done = stack.wait_until(running["id"], {"succeeded"})

    assert done["progress"]["step"] == 1600 and done["attempts"] == 2
    _assert_ordered_without_duplicates(stack.all_metrics(running["id"]))
    # The queued run's job was consumed by now and never started it.
    never = stack.get(queued["id"])
    assert never["status"] == "cancelled" and never["started_at"] is None
    assert never["attempts"] == 0 and stack.all_metrics(queued["id"]) == []


def test_bad_specs_are_refused_by_the_running_api(stack: Api) -> None:
    response = stack.http.post(
        "/v1/experiments", content=b"{oops", headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["error"]["fields"][0]["field"] == "body"


def test_a_playing_match_is_cancelled_and_its_worker_stops_it(stack: Api) -> None:
    """A match of 1,000 episodes (minutes of play) is cancelled while it plays: it reads
    ``cancelled`` at once, its worker stops the play within seconds, and the next match is
    played by the same worker."""
    long = {
        "env": {"id": "simple_tag_v3"},
        "teams": {"adversary": "random", "agent": "random"},
        "episodes": 1000,
    }
    playing = stack.http.post("/v1/matches", json=long).json()
    deadline = time.monotonic() + 120
    while stack.http.get(f"/v1/matches/{playing['id']}").json()["status"] != "running":
        assert time.monotonic() < deadline, "the match never started"
        time.sleep(0.2)

    cancelled = stack.http.post(f"/v1/matches/{playing['id']}/cancel")
    asked = time.monotonic()

    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    short = {**long, "episodes": 2}
    following = stack.http.post("/v1/matches", json=short).json()
    while stack.http.get(f"/v1/matches/{following['id']}").json()["status"] != "succeeded":
        assert time.monotonic() - asked < 60, "the worker kept playing the cancelled match"
        time.sleep(0.2)
    ended = stack.http.get(f"/v1/matches/{playing['id']}").json()
    assert ended["status"] == "cancelled" and ended["result"] is None


def test_a_run_warm_starts_from_another_runs_checkpoint(
    stack: Api, tiny_spec: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    """Runs shorter than learning_starts make no update: their checkpoint holds what they took."""
    parent = stack.submit(tiny_spec(total_steps=400, name="parent"))
    stack.wait_until(parent["id"], {"succeeded"})
    latest = stack.checkpoints(parent["id"])[-1]
    children = {
        what: stack.submit(
            tiny_spec(
                total_steps=40,
                name=f"warm {what}",
                init={"experiment_id": parent["id"], "what": what},
            )
        )  # fmt: skip
        for what in ("policy", "all")
    }
    taken = _tensors(stack, parent["id"], latest["id"], tmp_path / "parent.ckpt")
    for what, child in children.items():
        assert child["parent"] == {
            "experiment_id": parent["id"], "checkpoint_id": latest["id"], "what": what
        }  # fmt: skip
        stack.wait_until(child["id"], {"succeeded"})
        logs = stack.http.get(
            f"/v1/experiments/{child['id']}/events", params={"format": "json", "kinds": "log"}
        ).json()
        messages = [e["data"]["message"] for e in logs["items"]]
        took = f"warm start: took the {what} of experiment {parent['id']}'s checkpoint"
        assert any(took in m for m in messages), messages
        own = stack.checkpoints(child["id"])[-1]
        assert own["step"] == 40
        mine = _tensors(stack, child["id"], own["id"], tmp_path / f"{what}.ckpt")
        actor = [n for n in taken if n.startswith("actor.")]
        assert actor and all(np.array_equal(mine[n], taken[n]) for n in actor)
        # policy: the target starts at the policy it tracks; all: at the parent's target.
        target = {n: taken[n if what == "policy" else f"target_{n}"] for n in actor}
        assert all(np.array_equal(mine[f"target_{n}"], target[n]) for n in actor)
        critic = np.array_equal(mine["critic.layers.0.weight"], taken["critic.layers.0.weight"])
        assert critic == (what == "all")


def _tensors(stack: Api, experiment_id: str, checkpoint_id: str, path: Path) -> dict[str, Any]:
    from learners.checkpoint import read

    response = stack.http.get(f"/v1/experiments/{experiment_id}/checkpoints/{checkpoint_id}/file")
    assert response.status_code == 200
    path.write_bytes(response.content)
    return read(path)[0]
