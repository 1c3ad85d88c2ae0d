"""What a careless or hostile client sends: paths that climb out of their folder, bodies and fields
too large, JSON nested without end, and text in every script. Each gets a 4xx in the error shape
(never a 500), and nothing is stored."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from tests.auth_support import bearer, experiment_count

pytestmark = pytest.mark.integration

# Encoded, so that the client sends them as they are (it would resolve a plain ``..`` itself).
TRAVERSALS = ["..%2F..%2Fetc%2Fpasswd", "%2e%2e%2f%2e%2e%2fapi%2fapp.py", "%2E%2E", "%00", "a%5Cb"]


def _count(session: Session) -> int:
    return experiment_count(session, "team-a")


@pytest.mark.parametrize("piece", TRAVERSALS)
@pytest.mark.parametrize(
    "template",
    [
        "/static/{x}",
        "/static/js/{x}",
        "/v1/experiments/{x}",
        "/v1/experiments/{x}/timeline",
        "/v1/experiments/{id}/checkpoints/{x}/file",
        "/v1/experiments/{id}/checkpoints/{x}/replay.gif",
        "/v1/projects/{x}/keys",
    ],
)
def test_path_traversal_in_every_path_parameter_is_not_found(
    client: TestClient,
    keys: dict[str, str],
    example_spec: dict[str, Any],
    template: str,
    piece: str,
) -> None:
    experiment = client.post("/v1/experiments", json=example_spec).json()
    path = template.format(x=piece, id=experiment["id"])

    response = client.get(path, headers=bearer(keys["admin"]))

    assert response.status_code == 404, (path, response.text)
    assert response.json()["error"]["code"] == "not_found"
    assert "root:" not in response.text and "create_app" not in response.text


def test_an_oversized_body_is_413_whether_it_declares_its_length_or_not(
    client: TestClient, session: Session
) -> None:
    big = b'{"name": "' + b"x" * (2 << 20) + b'"}'

    json_body = {"content-type": "application/json"}
    declared = client.post("/v1/experiments", content=big, headers=json_body)
    streamed = client.post(
        "/v1/experiments", content=iter([big[:1000], big[1000:]]), headers=json_body
    )
    key = client.post("/v1/session", content=big, headers=json_body)

    for response in (declared, streamed, key):
        assert response.status_code == 413, response.text
        assert response.json()["error"]["code"] == "too_large"
    assert _count(session) == 0


@pytest.mark.parametrize(
    ("field", "value"),
    [("name", "x" * 201), ("env.id", "y" * 101), ("hyperparameters.activation", "z" * 10_000)],
)
def test_an_oversized_field_is_422_naming_it(
    client: TestClient, example_spec: dict[str, Any], session: Session, field: str, value: str
) -> None:
    spec = {**example_spec, "env": dict(example_spec["env"]), "hyperparameters": {}}
    head, _, leaf = field.rpartition(".")
    (spec[head] if head else spec)[leaf] = value

    response = client.post("/v1/experiments", json=spec)

    assert response.status_code == 422
    assert field in [f["field"] for f in response.json()["error"]["fields"]]
    assert len(response.text) < 4000  # the refusal does not echo the value back whole
    assert _count(session) == 0


@pytest.mark.parametrize("depth", [33, 1000, 200_000])
@pytest.mark.parametrize("route", ["/v1/experiments", "/v1/session", "/v1/projects/team-a/keys"])
def test_json_nested_without_end_is_400(
    client: TestClient, keys: dict[str, str], session: Session, route: str, depth: int
) -> None:
    body = '{"name": ' + "[" * depth + "]" * depth + "}"

    headers = {**bearer(keys["admin"]), "content-type": "application/json"}

    response = client.post(route, content=body, headers=headers)

    assert response.status_code in (400, 422), response.text
    assert response.json()["error"]["fields"][0]["field"] in {"body", "name", "credential"}
    assert _count(session) == 0


@pytest.mark.parametrize(
    ("value", "status", "words"),
    [
        ("NaN", 400, "NaN is not a JSON number"),
        ("Infinity", 400, "Infinity is not a JSON number"),
        ("-Infinity", 400, "-Infinity is not a JSON number"),
        ("1e400", 422, "1e400, a number too large for a float"),
        ("9" * 5000, 422, "an integer of 5,000 digits"),
    ],
)
@pytest.mark.parametrize("route", ["/v1/experiments", "/v1/sweeps", "/v1/matches"])
def test_numbers_no_field_can_hold_are_refused_and_nothing_is_stored(
    client: TestClient,
    keys: dict[str, str],
    session: Session,
    route: str,
    value: str,
    status: int,
    words: str,
) -> None:
    body = (
        '{"name": "hostile", "algorithm": "ddpg", "backend": "torch", "total_steps": 1000, '
        '"env": {"suite": "gymnasium", "id": "Pendulum-v1", "kwargs": {"g": ' + value + "}}}"
    )
    headers = {**bearer(keys["admin"]), "content-type": "application/json"}

    response = client.post(route, content=body, headers=headers)

    assert response.status_code == status, response.text
    (problem,) = response.json()["error"]["fields"]
    assert problem["field"] == "body" and words in problem["reason"], problem
    assert _count(session) == 0
    # Nothing stored breaks the next request: a plain spec is still accepted.
    if route == "/v1/experiments":
        fine = body.replace(value, "9.81")
        assert client.post(route, content=fine, headers=headers).status_code == 201


def test_names_in_any_script_are_stored_and_read_back_as_sent(
    client: TestClient, example_spec: dict[str, Any], keys: dict[str, str]
) -> None:
    names = ["Élan vital", "训练 🚀", "ضبط", "שלום עולם", "<script>alert(1)</script>"]
    for name in names:
        created = client.post("/v1/experiments", json={**example_spec, "name": name})
        assert created.status_code == 201
        assert client.get(f"/v1/experiments/{created.json()['id']}").json()["name"] == name
    # A bidirectional override is not a script: it reorders what a table shows (422, see
    # tests/api/test_api_bounds.py for every such character).
    reordered = client.post("/v1/experiments", json={**example_spec, "name": "\u202eevil\u202c"})
    assert reordered.status_code == 422
    key = client.post(
        "/v1/projects/team-a/keys",
        json={"name": "测试 ключ", "role": "viewer"},
        headers=bearer(keys["admin"]),
    )
    assert key.status_code == 201 and key.json()["key"]["name"] == "测试 ключ"


def test_a_bogus_last_event_id_is_422_naming_it(
    client: TestClient, example_spec: dict[str, Any]
) -> None:
    created = client.post("/v1/experiments", json=example_spec).json()
    for bogus in ("-1", "1e3", "0x10", "9" * 40, "1; DROP TABLE experiments"):
        response = client.get(
            f"/v1/experiments/{created['id']}/events",
            params={"format": "json"},
            headers={"last-event-id": bogus},
        )
        assert response.status_code == 422, bogus
        assert [f["field"] for f in response.json()["error"]["fields"]] == ["Last-Event-ID"]


@pytest.mark.parametrize(
    ("path", "query", "field"),
    [
        ("/v1/experiments/{id}/metrics", "names=a&names=b&after_step=3", "names"),
        ("/v1/experiments", "limit=2&limit=3", "limit"),
        ("/v1/metrics", "experiment_ids={id}&experiment_ids={id}", "experiment_ids"),
    ],
)
def test_a_single_valued_query_parameter_given_twice_is_a_422_naming_it(
    client: TestClient,
    keys: dict[str, str],
    example_spec: dict[str, Any],
    path: str,
    query: str,
    field: str,
) -> None:
    experiment = client.post("/v1/experiments", json=example_spec).json()
    url = f"{path}?{query}".format(id=experiment["id"])

    response = client.get(url, headers=bearer(keys["admin"]))
    once = client.get(url.split("&")[0], headers=bearer(keys["admin"]))

    assert response.status_code == 422, response.text
    assert response.json()["error"]["fields"] == [
        {"field": field, "reason": "given 2 times; it takes one value"}
    ]
    assert once.status_code == 200, once.text


def test_a_repeated_query_key_the_route_does_not_take_is_ignored(
    client: TestClient, keys: dict[str, str]
) -> None:
    response = client.get("/v1/experiments?unknown=1&unknown=2", headers=bearer(keys["admin"]))

    assert response.status_code == 200, response.text
