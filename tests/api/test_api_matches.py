"""``/v1/matches`` through the app, on PostgreSQL and the embedded broker: a match is checked
whole before anything is stored (scenario, teams, the project's experiments and checkpoints, the
policy's fit to the team's seats), stored queued and sent to its backend's queue, listed and read
within its project only; a played match shows its result and serves its replay."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core.enums import MatchStatus
from core.experiments.checkpoints import CheckpointRepository
from core.matches.repository import MatchRepository
from core.models import Checkpoint, Match, Project
from core.storage import FilesystemStore
from tests.auth_support import bearer

pytestmark = pytest.mark.integration

TAG = {"suite": "mpe", "id": "simple_tag_v3", "kwargs": {"continuous_actions": True}}


def _maddpg(env: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "predators",
        "algorithm": "maddpg",
        "backend": "torch",
        "env": {**env, "num_envs": 1},
        "total_steps": 1000,
    }


@pytest.fixture
def trained(client: TestClient, session: Session) -> Callable[..., tuple[str, list[Checkpoint]]]:
    """Submits an experiment on ``env`` and records checkpoints at ``steps`` for it (rows only:
    submitting a match reads no file)."""

    def make(env: dict[str, Any] = TAG, steps: tuple[int, ...] = (200, 400)) -> Any:
        response = client.post("/v1/experiments", json=_maddpg(env))
        assert response.status_code == 201, response.text
        experiment_id: str = response.json()["id"]
        rows = [
            CheckpointRepository(session).record(
                experiment_id, step, f"experiments/{experiment_id}/step-{step}.ckpt", 10, "ab" * 32
            )
            for step in steps
        ]
        session.commit()
        return experiment_id, rows

    return make


def _count(session: Session) -> int:
    # Team-a's only: other test modules commit matches of their own to the same database.
    query = select(func.count()).select_from(Match).join(Project).where(Project.name == "team-a")
    return int(session.scalar(query) or 0)


def test_a_match_is_stored_queued_and_sent_to_its_backends_queue(
    client: TestClient,
    session: Session,
    trained: Callable[..., tuple[str, list[Checkpoint]]],
    queued_messages: Callable[[], list[dict[str, Any]]],
) -> None:
    experiment_id, rows = trained()
    before = len(queued_messages())

    response = client.post(
        "/v1/matches",
        json={
            "env": TAG,
            "teams": {"adversary": {"experiment_id": experiment_id}, "agent": "random"},
            "episodes": 20,
            "seed": 7,
        },
    )

    assert response.status_code == 201, response.text
    body = response.json()
    assert response.headers["location"] == f"/v1/matches/{body['id']}"
    assert body["status"] == "queued" and body["result"] is None and body["replay_url"] is None
    # Without a checkpoint id, the experiment's latest at submission.
    assert body["teams"]["adversary"] == {
        "experiment_id": experiment_id,
        "checkpoint_id": rows[-1].id,
        "step": 400,
        "algorithm": "maddpg",
        "backend": "torch",
        "sha256": "ab" * 32,
    }
    assert body["teams"]["agent"] == "random"
    assert list(body["teams"]) == ["adversary", "agent"]  # the scenario's order
    assert body["name"] == "maddpg@400 vs random"
    assert (body["episodes"], body["seed"], body["backend"]) == (20, 7, "torch")
    sent = queued_messages()[before:]
    assert [(m["task"], m["args"]) for m in sent] == [("marlforge.play_match", [body["id"]])]
    assert sent[0]["queue"] == "apitest.torch.mpe"
    assert client.get(f"/v1/matches/{body['id']}").json() == body


def test_a_named_checkpoint_plays_and_random_against_random_needs_no_experiment(
    client: TestClient, trained: Callable[..., tuple[str, list[Checkpoint]]]
) -> None:
    experiment_id, rows = trained()

    named = client.post(
        "/v1/matches",
        json={
            "env": TAG,
            "teams": {
                "adversary": "random",
                "agent": {"experiment_id": experiment_id, "checkpoint_id": rows[0].id},
            },
        },
    )
    coin_flips = client.post(
        "/v1/matches",
        json={
            "env": {"id": "simple_adversary_v3"},
            "teams": {"adversary": "random", "agent": "random"},
        },
    )

    assert named.status_code == 201, named.text
    assert named.json()["teams"]["agent"]["step"] == 200
    assert named.json()["episodes"] == 100  # the default
    assert coin_flips.status_code == 201, coin_flips.text
    assert coin_flips.json()["env"] == {"suite": "mpe", "id": "simple_adversary_v3", "kwargs": {}}


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        ({"env": {"id": "simple_chess_v0"}}, "env.id", "unknown mpe scenario"),
        (
            {"env": {"id": "simple_tag_v3", "kwargs": {"num_good": "two"}}},
            "env.kwargs.num_good",
            "",
        ),
        ({"env": {"id": "simple_tag_v3", "kwargs": {"num_good": 5000}}}, "env.kwargs.num_good", ""),
        ({"teams": {"adversary": "random"}}, "teams", "missing: agent"),
        ({"teams": {"adversary": "random", "agent": "random", "prey": "random"}}, "teams", "prey"),
        ({"teams": {"adversary": "random", "agent": "best"}}, "teams.agent", ""),
        ({"episodes": 0}, "episodes", ""),
        ({"episodes": 1001}, "episodes", ""),
        ({"seed": -1}, "seed", ""),
        ({"rounds": 3}, "rounds", ""),
    ],
)
def test_a_bad_match_is_a_422_naming_the_field_and_stores_nothing(
    client: TestClient,
    session: Session,
    queued_messages: Callable[[], list[dict[str, Any]]],
    change: dict[str, Any],
    field: str,
    reason: str,
) -> None:
    body = {"env": TAG, "teams": {"adversary": "random", "agent": "random"}, **change}
    before = len(queued_messages())

    response = client.post("/v1/matches", json=body)

    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_match"
    fields = {f["field"]: f["reason"] for f in error["fields"]}
    assert any(f == field or f.startswith(f"{field}.") for f in fields), fields
    assert reason in " ".join(fields.values())
    assert _count(session) == 0
    assert len(queued_messages()) == before


def test_a_checkpoint_not_in_the_project_missing_or_not_fitting_is_a_422(
    client: TestClient,
    anonymous: TestClient,
    session: Session,
    keys: dict[str, str],
    trained: Callable[..., tuple[str, list[Checkpoint]]],
) -> None:
    ours, _ = trained()
    elsewhere = anonymous.post("/v1/experiments", json=_maddpg(TAG), headers=bearer(keys["other"]))
    theirs = elsewhere.json()["id"]
    untrained = client.post("/v1/experiments", json=_maddpg(TAG)).json()["id"]
    adversary_run, _ = trained(
        {"suite": "mpe", "id": "simple_adversary_v3", "kwargs": {"continuous_actions": True}}
    )
    more_prey, _ = trained({**TAG, "kwargs": {"continuous_actions": True, "num_good": 2}})

    def refused(adversary: Any, field: str) -> str:
        response = client.post(
            "/v1/matches", json={"env": TAG, "teams": {"adversary": adversary, "agent": "random"}}
        )
        assert response.status_code == 422, response.text
        fields = {f["field"]: f["reason"] for f in response.json()["error"]["fields"]}
        assert list(fields) == [field], fields
        return fields[field]

    assert "no experiment" in refused({"experiment_id": theirs}, "teams.adversary.experiment_id")
    assert "no checkpoint yet" in refused(
        {"experiment_id": untrained}, "teams.adversary.experiment_id"
    )
    assert "no checkpoint 01JAAAAAAAAAAAAAAAAAAAAAAA" in refused(
        {"experiment_id": ours, "checkpoint_id": "01JAAAAAAAAAAAAAAAAAAAAAAA"},
        "teams.adversary.checkpoint_id",
    )
    other_scenario = refused({"experiment_id": adversary_run}, "teams.adversary")
    assert "does not fit the adversary team's seats" in other_scenario
    assert "simple_adversary_v3" in other_scenario
    assert "agents" in refused({"experiment_id": more_prey}, "teams.adversary")
    assert _count(session) == 0


def test_matches_are_listed_and_read_within_their_project_only(
    client: TestClient, anonymous: TestClient, keys: dict[str, str]
) -> None:
    made = [
        client.post(
            "/v1/matches",
            json={"env": TAG, "teams": {"adversary": "random", "agent": "random"}, "seed": seed},
        ).json()["id"]
        for seed in range(3)
    ]

    first = client.get("/v1/matches", params={"limit": 2}).json()
    rest = client.get("/v1/matches", params={"after": first["next_after"]}).json()
    other = anonymous.get("/v1/matches", headers=bearer(keys["other"])).json()
    hidden = anonymous.get(f"/v1/matches/{made[0]}", headers=bearer(keys["other"]))

    assert [m["id"] for m in first["items"] + rest["items"]] == made[::-1]
    assert rest["next_after"] is None
    assert other["items"] == []
    assert hidden.status_code == 404 and hidden.json()["error"]["code"] == "not_found"
    assert client.get("/v1/matches/not-an-id").status_code == 404
    assert client.get("/v1/matches", params={"status": "succeeded"}).json()["items"] == []


def test_a_played_match_shows_its_result_and_serves_its_replay(
    client: TestClient, session: Session, storage: FilesystemStore
) -> None:
    match_id = client.post(
        "/v1/matches", json={"env": TAG, "teams": {"adversary": "random", "agent": "random"}}
    ).json()["id"]
    assert client.get(f"/v1/matches/{match_id}/replay.gif").status_code == 404
    gif = b"GIF89a" + bytes(100)
    stored = storage.put(f"matches/{match_id}/replay.gif", lambda p: p.write_bytes(gif))
    result = {
        "episodes": 100,
        "teams": {
            "adversary": {"mean_return": 12.5, "ci95": [10.0, 15.0]},
            "agent": {"mean_return": -14.0, "ci95": [-17.5, -10.5]},
        },
        "score": {"collisions_per_episode": 1.25},
    }
    repository = MatchRepository(session)
    assert repository.move(match_id, MatchStatus.QUEUED, MatchStatus.RUNNING, worker_id="w-1")
    assert repository.move(
        match_id, MatchStatus.RUNNING, MatchStatus.SUCCEEDED, result=result, replay_path=stored.key
    )
    session.commit()

    body = client.get(f"/v1/matches/{match_id}").json()
    replay = client.get(body["replay_url"])

    assert body["status"] == "succeeded" and body["worker_id"] == "w-1"
    assert body["result"] == result
    assert list(body["result"]["teams"]) == ["adversary", "agent"]
    assert body["finished_at"] is not None and body["started_at"] is not None
    assert replay.status_code == 200 and replay.content == gif
    assert replay.headers["content-type"] == "image/gif"
    # A match moves only from the status expected: a second claim finds nothing to play.
    assert not repository.move(match_id, MatchStatus.QUEUED, MatchStatus.RUNNING)
