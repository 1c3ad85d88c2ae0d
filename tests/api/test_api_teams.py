"""Teams through the API: the catalogue shows each environment's teams."""

from __future__ import annotations

from fastapi.testclient import TestClient


def test_the_catalogue_shows_each_environments_teams(client: TestClient) -> None:
    catalogue = {a["algorithm"]: a for a in client.get("/v1/algorithms").json()}

    maddpg = {e["id"]: e["teams"] for e in catalogue["maddpg"]["environments"]}
    assert maddpg == {
        "simple_spread_v3": ["agent"],
        "simple_adversary_v3": ["adversary", "agent"],
        "simple_push_v3": ["adversary", "agent"],
        "simple_tag_v3": ["adversary", "agent"],
    }
    assert {e["id"]: e["teams"] for e in catalogue["ddpg"]["environments"]}["Pendulum-v1"] == [
        "agent"
    ]
