"""Teams through the API: the catalogue shows each environment's teams, and WQMIX (one team
reward) is refused a scenario with two teams at submission."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient


def test_the_catalogue_shows_each_environments_teams(client: TestClient) -> None:
    catalogue = {a["algorithm"]: a for a in client.get("/v1/algorithms").json()}

    maddpg = {e["id"]: e["teams"] for e in catalogue["maddpg"]["environments"]}
    assert (
        maddpg.items()
        >= {
            "simple_spread_v3": ["agent"],
            "simple_adversary_v3": ["adversary", "agent"],
            "simple_push_v3": ["adversary", "agent"],
            "simple_tag_v3": ["adversary", "agent"],
            "simple_speaker_listener_v4": ["agent"],
            "simple_world_comm_v3": ["adversary", "agent"],
        }.items()
    )
    groups = {e["id"]: e["groups"] for e in catalogue["maddpg"]["environments"]}
    assert groups["simple_speaker_listener_v4"] == ["speaker", "listener"]
    assert {e["id"]: e["teams"] for e in catalogue["ddpg"]["environments"]}["Pendulum-v1"] == [
        "agent"
    ]
    # WQMIX learns one team reward: the catalogue offers it the cooperative scenarios only.
    wqmix = {e["id"] for e in catalogue["wqmix"]["environments"]}
    assert "simple_spread_v3" in wqmix and "simple_speaker_listener_v4" in wqmix
    assert not wqmix & {"simple_adversary_v3", "simple_tag_v3", "simple_world_comm_v3"}


def test_wqmix_on_a_competitive_scenario_is_refused_and_nothing_is_stored(
    client: TestClient, queued_messages: Callable[[], list[dict[str, Any]]]
) -> None:
    spec = {
        "name": "predators and prey",
        "algorithm": "wqmix",
        "backend": "torch",
        "env": {"suite": "mpe", "id": "simple_tag_v3", "num_envs": 2},
        "total_steps": 10_000,
    }

    response = client.post("/v1/experiments", json=spec)

    assert response.status_code == 422
    (problem,) = response.json()["error"]["fields"]
    assert problem["field"] == "env.id"
    assert problem["reason"].startswith(
        "WQMIX learns one team reward; simple_tag_v3 has two teams (adversary, agent)"
    )
    assert client.get("/v1/experiments").json()["items"] == []
    assert queued_messages() == []
    cooperative = {**spec, "env": {**spec["env"], "id": "simple_spread_v3"}}
    assert client.post("/v1/experiments", json=cooperative).status_code == 201
