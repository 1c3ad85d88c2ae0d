"""Every integer and id the API takes is bounded in its schema and checked the same way by the
server: a value no database column can hold is a 422 naming its parameter, never a 500."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from learners.spec import LABEL_REASON

pytestmark = pytest.mark.integration

TOO_BIG = str(2**63)  # one past the largest BIGINT


@pytest.fixture
def experiment_id(client: TestClient, example_spec: dict[str, Any]) -> str:
    created: dict[str, Any] = client.post("/v1/experiments", json=example_spec).json()
    return str(created["id"])


@pytest.mark.parametrize(
    ("path", "params", "headers", "field"),
    [
        ("/metrics", {"after_step": TOO_BIG}, {}, "after_step"),
        ("/events", {"format": "json", "after": TOO_BIG}, {}, "after"),
        ("/events", {"format": "json"}, {"last-event-id": "9" * 19}, "Last-Event-ID"),
        ("/events", {"format": "json"}, {"last-event-id": "١٢".encode()}, "Last-Event-ID"),
        ("/events", {"format": "json", "kinds": "status, log"}, {}, "kinds"),
        ("/events", {"format": "json", "kinds": ""}, {}, "kinds"),
    ],
)
def test_out_of_range_parameters_are_422_naming_them(
    client: TestClient,
    experiment_id: str,
    path: str,
    params: dict[str, str],
    headers: dict[str, Any],
    field: str,
) -> None:
    response = client.get(f"/v1/experiments/{experiment_id}{path}", params=params, headers=headers)

    assert response.status_code == 422, response.text
    assert [f["field"] for f in response.json()["error"]["fields"]] == [field]


def test_the_largest_allowed_values_are_answered(client: TestClient, experiment_id: str) -> None:
    largest = str(2**63 - 1)
    metrics = client.get(f"/v1/experiments/{experiment_id}/metrics", params={"after_step": largest})
    events = client.get(
        f"/v1/experiments/{experiment_id}/events",
        params={"format": "json", "after": largest},
        headers={"last-event-id": "9" * 18},
    )

    assert metrics.status_code == 200 and metrics.json()["items"] == []
    assert events.status_code == 200 and events.json()["items"] == []


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"experiment_ids": ""}, "experiment_ids"),
        ({"experiment_ids": ",".join(["01JAAAAAAAAAAAAAAAAAAAAAAA"] * 21)}, "experiment_ids"),
        ({"experiment_ids": " 01JAAAAAAAAAAAAAAAAAAAAAAA"}, "experiment_ids"),
    ],
)
def test_metric_series_ids_follow_their_schema(
    client: TestClient, params: dict[str, str], field: str
) -> None:
    response = client.get("/v1/metrics", params=params)

    assert response.status_code == 422
    assert [f["field"] for f in response.json()["error"]["fields"]] == [field]


def test_the_schema_publishes_the_bounds(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]

    def param(path: str, name: str) -> dict[str, Any]:
        (found,) = [p for p in paths[path]["get"]["parameters"] if p["name"] == name]
        schema: dict[str, Any] = found["schema"]
        return schema

    after_step = param("/v1/experiments/{experiment_id}/metrics", "after_step")
    assert after_step["anyOf"][0]["maximum"] == 2**63 - 1
    assert "pattern" in param("/v1/experiments", "after")
    assert "pattern" in param("/v1/metrics", "experiment_ids")
    assert "pattern" in param("/v1/experiments/{experiment_id}/events", "kinds")


def test_text_with_a_nul_character_is_422_not_a_database_error(
    client: TestClient, example_spec: dict[str, Any], keys: dict[str, str], experiment_id: str
) -> None:
    # PostgreSQL's text and JSONB columns cannot hold U+0000: it must be refused before SQL.
    named = client.post("/v1/experiments", json={**example_spec, "name": "a\x00b"})
    kwargs = {**example_spec, "env": {**example_spec["env"], "kwargs": {"\x00": 1}}}
    in_kwargs = client.post("/v1/experiments", json=kwargs)
    metric = client.get(f"/v1/experiments/{experiment_id}/metrics", params={"names": "a\x00"})
    key = client.post(
        "/v1/projects/team-a/keys",
        json={"name": "a\x00", "role": "viewer"},
        headers={"authorization": f"Bearer {keys['admin']}"},
    )

    assert named.status_code == 422
    assert named.json()["error"]["fields"] == [{"field": "name", "reason": LABEL_REASON}]
    assert in_kwargs.status_code == 422
    assert metric.status_code == 422
    assert [f["field"] for f in metric.json()["error"]["fields"]] == ["names"]
    assert key.status_code == 422


@pytest.mark.parametrize(
    "name",
    [
        "evil\x1b[2J\x1b]0;pwned\x07",  # clears the screen, retitles the terminal
        "two\nlines",  # forges a line of a table
        "tab\there",
        "c1\x9bcontrol",  # the C1 control sequence introducer
        "right\u202eleft",  # a bidirectional override
        "line\u2028separator",
    ],
)
def test_names_with_control_characters_are_422_naming_the_field(
    client: TestClient,
    example_spec: dict[str, Any],
    keys: dict[str, str],
    experiment_id: str,
    name: str,
) -> None:
    admin = {"authorization": f"Bearer {keys['admin']}"}
    answers = {
        "name": client.post("/v1/experiments", json={**example_spec, "name": name}),
        "patch": client.patch(f"/v1/experiments/{experiment_id}", json={"name": name}),
        "sweep": client.post("/v1/sweeps", json={"name": name, "base": example_spec}),
        "match": client.post(
            "/v1/matches",
            json={"name": name, "env": {"id": "simple_tag_v3"}, "teams": {}},
        ),
        "key": client.post(
            "/v1/projects/team-a/keys", json={"name": name, "role": "viewer"}, headers=admin
        ),
    }

    for what, answer in answers.items():
        assert answer.status_code == 422, (what, answer.text)
        fields = {f["field"]: f["reason"] for f in answer.json()["error"]["fields"]}
        assert fields.get("name") == LABEL_REASON, (what, fields)
    # Nothing was stored: the run keeps its name, and no sweep, match or key appeared.
    assert client.get(f"/v1/experiments/{experiment_id}").json()["name"] != name
    assert all(s["name"] != name for s in client.get("/v1/sweeps").json()["items"])
    assert all(m["name"] != name for m in client.get("/v1/matches").json()["items"])


def test_names_in_any_language_and_with_symbols_are_accepted(
    client: TestClient, example_spec: dict[str, Any]
) -> None:
    name = 'Ölçüm 実験 ✓ — lr=3e-4 (α/β) "quoted"'
    answer = client.post("/v1/experiments", json={**example_spec, "name": name})
    assert answer.status_code == 201, answer.text
    assert answer.json()["name"] == name
