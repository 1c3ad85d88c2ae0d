"""Bad input gets a 4xx in one JSON shape naming the field, and leaves no row behind."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core.models import Experiment
from learners.enums import Algorithm, Backend
from learners.registry import entries

pytestmark = pytest.mark.integration

Messages = Callable[[], list[dict[str, Any]]]


def _unbuilt_pair() -> tuple[str, str]:
    # Taken from the catalogue, so the test keeps meaning something as backends are built.
    for e in entries():
        for backend in Backend:
            if backend not in e.backends:
                return e.algorithm.value, backend.value
    pytest.skip("every catalogued algorithm is built for every backend")


def _without(spec: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in spec.items() if k != key}


def _with(spec: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(spec)
    target = changed
    *parents, last = path.split(".")
    for part in parents:
        target = target[part]
    target[last] = value
    return changed


BAD_SPECS: list[tuple[str, Callable[[dict[str, Any]], Any], str]] = [
    ("unknown algorithm", lambda s: _with(s, "algorithm", "alphazero"), "algorithm"),
    ("unknown backend", lambda s: _with(s, "backend", "jax"), "backend"),
    (
        "unbuilt pair",
        lambda s: (
            _with(s, "backend", _unbuilt_pair()[1])
            if s["algorithm"] == _unbuilt_pair()[0]
            else _with(_with(s, "algorithm", _unbuilt_pair()[0]), "backend", _unbuilt_pair()[1])
        ),
        "backend",
    ),
    ("negative total_steps", lambda s: _with(s, "total_steps", -5), "total_steps"),
    (
        "unknown hyperparameter",
        lambda s: _with(s, "hyperparameters", {"learning_rate_actr": 0.1}),
        "hyperparameters.learning_rate_actr",
    ),
    (
        "wrong type",
        lambda s: _with(s, "hyperparameters", {"batch_size": "big"}),
        "hyperparameters.batch_size",
    ),
    ("wrong type at top level", lambda s: _with(s, "seed", [1]), "seed"),
    ("missing field", lambda s: _without(s, "env"), "env"),
    ("missing nested field", lambda s: _with(s, "env", {"suite": "gymnasium"}), "env.id"),
    ("not an object", lambda s: [s], "body"),
]


@pytest.mark.parametrize(("case", "mutate", "field"), BAD_SPECS, ids=[c[0] for c in BAD_SPECS])
def test_bad_specs_are_422_naming_the_field_and_store_nothing(
    client: TestClient,
    example_spec: dict[str, Any],
    session: Session,
    queued_messages: Messages,
    case: str,
    mutate: Callable[[dict[str, Any]], Any],
    field: str,
) -> None:
    before = session.scalar(select(func.count()).select_from(Experiment))

    response = client.post("/v1/experiments", json=mutate(example_spec))

    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_spec"
    assert field in [f["field"] for f in error["fields"]], error
    assert all(f["reason"] for f in error["fields"])
    assert session.scalar(select(func.count()).select_from(Experiment)) == before
    assert queued_messages() == []


def test_an_unbuilt_pair_says_it_is_not_built(
    client: TestClient, example_spec: dict[str, Any]
) -> None:
    algorithm, backend = _unbuilt_pair()

    response = client.post(
        "/v1/experiments", json={**example_spec, "algorithm": algorithm, "backend": backend}
    )

    assert response.status_code == 422
    reasons = {f["field"]: f["reason"] for f in response.json()["error"]["fields"]}
    assert "not built" in reasons["backend"]


@pytest.mark.parametrize("algorithm", [a.value for a in Algorithm])
def test_every_algorithm_name_gets_201_or_a_422_never_a_500(
    client: TestClient, example_spec: dict[str, Any], algorithm: str
) -> None:
    # Algorithms listed in the enum but not (yet) in the catalogue must be refused cleanly.
    response = client.post("/v1/experiments", json={**example_spec, "algorithm": algorithm})

    assert response.status_code in (201, 422), response.text


@pytest.mark.parametrize(
    ("body", "reason"),
    [(b"{not json", "not valid JSON"), (b"", "empty"), (b"\xff\xfe", "not valid JSON")],
)
def test_a_body_that_is_not_json_is_400(
    client: TestClient, session: Session, body: bytes, reason: str
) -> None:
    before = session.scalar(select(func.count()).select_from(Experiment))

    response = client.post(
        "/v1/experiments", content=body, headers={"content-type": "application/json"}
    )

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_json"
    assert error["fields"][0]["field"] == "body" and reason in error["fields"][0]["reason"]
    assert session.scalar(select(func.count()).select_from(Experiment)) == before


def test_unknown_routes_and_methods_use_the_error_shape(client: TestClient) -> None:
    missing = client.get("/v1/nothing-here")
    wrong_method = client.delete("/v1/experiments")

    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert wrong_method.status_code == 405
    assert wrong_method.json()["error"]["code"] == "method_not_allowed"


def test_openapi_describes_every_route_and_the_spec_body(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()

    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            assert operation.get("description"), f"{method.upper()} {path} has no description"
    body = schema["paths"]["/v1/experiments"]["post"]["requestBody"]["content"]["application/json"]
    spec_schema = schema["components"]["schemas"][body["schema"]["$ref"].rsplit("/", 1)[1]]
    # One variant per algorithm, each as precise as the checks the server makes.
    variants = {v["properties"]["algorithm"]["const"]: v for v in spec_schema["oneOf"]}
    assert set(variants) == {a["algorithm"] for a in client.get("/v1/algorithms").json()}
    for variant in variants.values():
        assert {"name", "algorithm", "backend", "env", "total_steps"} <= set(variant["required"])
        assert variant["properties"]["hyperparameters"]["additionalProperties"] is False
    ddpg_envs = [
        e["properties"]["id"]["const"] for e in variants["ddpg"]["properties"]["env"]["oneOf"]
    ]
    assert "Pendulum-v1" in ddpg_envs and "simple_spread_v3" not in ddpg_envs
    wqmix_env = variants["wqmix"]["properties"]["env"]["oneOf"][0]["properties"]["kwargs"]
    assert wqmix_env["properties"]["continuous_actions"] == {"const": False}
    assert "ErrorResponse" in schema["components"]["schemas"]


def test_the_catalogue_lists_built_backends_and_hyperparameters(client: TestClient) -> None:
    catalogue = {a["algorithm"]: a for a in client.get("/v1/algorithms").json()}

    assert "torch" in catalogue["ddpg"]["backends"]
    tau = catalogue["ddpg"]["hyperparameters"]["properties"]["tau"]
    assert tau["default"] == 0.005 and tau["description"]


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ("/v1/experiments", "GET, POST"),
        ("/v1/session", "DELETE, POST"),
        ("/v1/projects/team-a/keys", "GET, POST"),
        ("/v1/experiments/01JAAAAAAAAAAAAAAAAAAAAAAA/cancel", "POST"),
    ],
)
def test_a_wrong_method_is_405_listing_every_allowed_one(
    client: TestClient, path: str, allowed: str
) -> None:
    response = client.request("OPTIONS", path)

    assert response.status_code == 405
    assert response.headers["allow"] == allowed
    assert response.json()["error"]["code"] == "method_not_allowed"
