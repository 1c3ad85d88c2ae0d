"""``/v1/environments`` lists what the installed suites' adapters declare, and a spec naming a
suite, an id or an argument they do not declare is a 422 naming the field, with nothing stored
or queued."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient


def _suites(client: TestClient) -> dict[str, dict[str, Any]]:
    response = client.get("/v1/environments")
    assert response.status_code == 200
    return {s["suite"]: s for s in response.json()["suites"]}


def test_every_built_in_suite_is_listed_from_its_adapter(client: TestClient) -> None:
    suites = _suites(client)
    assert list(suites)[:6] == ["gymnasium", "mpe", "sisl", "mamujoco", "lbf", "rware"]
    assert all(s["builtin"] for s in suites.values() if s["suite"] in list(suites)[:6])
    mpe = {e["id"]: e for e in suites["mpe"]["environments"]}
    assert len(mpe) == 12  # every mpe2 scenario
    listener = mpe["simple_speaker_listener_v4"]
    assert listener["groups"] == ["speaker", "listener"] and listener["teams"] == ["agent"] * 2
    assert listener["action_kind_kwarg"] == "continuous_actions"
    assert "wqmix" in listener["algorithms"] and "ddpg" not in listener["algorithms"]
    world = mpe["simple_world_comm_v3"]
    assert world["groups"][0] == "leadadversary" and "wqmix" not in world["algorithms"]
    assert mpe["simple_spread_v3"]["kwargs"]["N"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 32,
        "default": 3,
        "description": "1 to 32 agents",
    }
    assert "render_mode" not in mpe["simple_spread_v3"]["kwargs"]
    assert "render_mode" in suites["mpe"]["reserved_kwargs"]
    cheetah = {e["id"]: e for e in suites["mamujoco"]["environments"]}["HalfCheetah-2x3"]
    assert cheetah["action_kinds"] == ["continuous"] and "wqmix" not in cheetah["algorithms"]
    lbf = {e["id"]: e for e in suites["lbf"]["environments"]}
    assert lbf["Foraging-8x8-2p-2f-coop-v3"]["agents"] == 2
    assert set(lbf["Foraging-8x8-2p-2f-coop-v3"]["algorithms"]) == {
        "ippo",
        "mappo",
        "maddpg",
        "wqmix",
    }
    assert suites["gymnasium"]["multi_agent"] is False


def _spec(env: dict[str, Any], algorithm: str = "mappo") -> dict[str, Any]:
    return {
        "name": "env",
        "algorithm": algorithm,
        "backend": "torch",
        "env": env,
        "total_steps": 1000,
    }


@pytest.mark.parametrize(
    ("env", "algorithm", "field", "words"),
    [
        ({"suite": "meltingpot", "id": "x"}, "mappo", "env.suite", "no environment suite"),
        ({"suite": "lbf", "id": "Foraging-99x99-v3"}, "mappo", "env.id", "unknown lbf environment"),
        (
            {"suite": "rware", "id": "rware-tiny-2ag-v2", "kwargs": {"layout": "/etc/passwd"}},
            "mappo",
            "env.kwargs.layout",
            "takes no argument",
        ),
        (
            {"suite": "sisl", "id": "pursuit_v4", "kwargs": {"render_mode": "human"}},
            "ippo",
            "env.kwargs.render_mode",
            "rendering is chosen by MARLForge",
        ),
        (
            {"suite": "sisl", "id": "pursuit_v4", "kwargs": {"n_pursuers": 10_000}},
            "ippo",
            "env.kwargs.n_pursuers",
            "at most 32 pursuers",
        ),
        ({"suite": "mamujoco", "id": "Ant-2x4"}, "wqmix", "env.id", "needs discrete actions"),
        (
            {"suite": "lbf", "id": "Foraging-8x8-2p-2f-coop-v3"},
            "ddpg",
            "env.suite",
            "does not train",
        ),
        (
            {"suite": "mpe", "id": "simple_crypto_v3", "engine": "vector"},
            "mappo",
            "env.engine",
            "the vector engine models",
        ),
    ],
)
def test_what_no_adapter_declares_is_refused_and_nothing_is_stored(
    client: TestClient,
    queued_messages: Callable[[], list[dict[str, Any]]],
    env: dict[str, Any],
    algorithm: str,
    field: str,
    words: str,
) -> None:
    response = client.post("/v1/experiments", json=_spec(env, algorithm))
    assert response.status_code == 422, response.text
    problems = {p["field"]: p["reason"] for p in response.json()["error"]["fields"]}
    assert field in problems and words in problems[field], problems
    assert client.get("/v1/experiments").json()["items"] == []
    assert queued_messages() == []


def test_a_suite_id_the_adapters_declare_is_accepted(client: TestClient) -> None:
    env = {"suite": "mpe", "id": "simple_speaker_listener_v4", "num_envs": 2}
    response = client.post("/v1/experiments", json=_spec(env))
    assert response.status_code == 201, response.text
    assert response.json()["spec"]["env"]["engine"] == "mpe2"  # the vector engine lacks it
