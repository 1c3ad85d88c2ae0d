"""A route's path names a row that is not the caller's: the same 404 and wording for each resource
(``api.owned``), whether the id is unknown or not an id at all."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.errors import ApiError
from api.owned import owned_or_404

pytestmark = pytest.mark.integration

UNKNOWN = "01JAAAAAAAAAAAAAAAAAAAAAAA"


@pytest.mark.parametrize("row_id", [UNKNOWN, "not-an-id"])
@pytest.mark.parametrize(
    ("path", "thing"),
    [
        ("/v1/experiments/{id}", "experiment"),
        ("/v1/experiments/{id}/timeline", "experiment"),
        ("/v1/matches/{id}", "match"),
        ("/v1/matches/{id}/replay.gif", "match"),
        ("/v1/sweeps/{id}", "sweep"),
        ("/v1/sweeps/{id}/summary", "sweep"),
    ],
)
def test_an_unknown_row_is_404_naming_it(
    client: TestClient, path: str, thing: str, row_id: str
) -> None:
    response = client.get(path.format(id=row_id))

    assert response.status_code == 404, response.text
    error = response.json()["error"]
    assert error["code"] == "not_found"
    assert error["message"] == f"no {thing} with id {row_id!r}"


@pytest.mark.parametrize("suffix", ["file", "replay.gif"])
def test_an_unknown_checkpoint_is_404_naming_its_experiment(
    client: TestClient, example_spec: dict[str, Any], suffix: str
) -> None:
    experiment_id = client.post("/v1/experiments", json=example_spec).json()["id"]

    response = client.get(f"/v1/experiments/{experiment_id}/checkpoints/{UNKNOWN}/{suffix}")

    assert response.status_code == 404, response.text
    assert response.json()["error"]["message"] == f"no checkpoint {UNKNOWN!r} in {experiment_id}"


def test_a_malformed_id_is_never_looked_up() -> None:
    looked_up: list[tuple[str, str]] = []

    def lookup(row_id: str, project_id: str) -> str | None:
        looked_up.append((row_id, project_id))
        return row_id

    with pytest.raises(ApiError) as raised:
        owned_or_404(lookup, "widget", "x' OR 1=1", "project")

    assert raised.value.status_code == 404
    assert looked_up == []
    assert owned_or_404(lookup, "widget", UNKNOWN, "project") == UNKNOWN
