"""Tags and notes on a spec, ``PATCH /v1/experiments/{id}`` (name, tags, notes only) and the list
filters ``?tag=`` and ``?q=``."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from core.models import ExperimentEvent, ExperimentTag
from tests.auth_support import bearer

pytestmark = pytest.mark.integration


def _submit(client: TestClient, spec: dict[str, Any], **changes: Any) -> dict[str, Any]:
    response = client.post("/v1/experiments", json={**spec, **changes})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def _listed(client: TestClient, **params: str) -> list[str]:
    response = client.get("/v1/experiments", params=params)
    assert response.status_code == 200, response.text
    return [e["name"] for e in response.json()["items"]]


def test_tags_and_notes_are_stored_in_the_spec_a_repeated_tag_once(
    client: TestClient, example_spec: dict[str, Any]
) -> None:
    created = _submit(
        client, example_spec, tags=["lr:3e-4", "baseline", "lr:3e-4"], notes="first try"
    )

    assert created["spec"]["tags"] == ["lr:3e-4", "baseline"]
    assert created["spec"]["notes"] == "first try"
    untagged = _submit(client, example_spec)
    assert untagged["spec"]["tags"] == [] and untagged["spec"]["notes"] == ""


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"tags": ["has space"]}, "tags.0"),
        ({"tags": [""]}, "tags.0"),
        ({"tags": ["x" * 51]}, "tags.0"),
        ({"tags": [f"t{i}" for i in range(21)]}, "tags"),
        ({"tags": "baseline"}, "tags"),
        ({"notes": "x" * 10_001}, "notes"),
    ],
)
def test_bad_tags_or_notes_are_refused_naming_the_field(
    client: TestClient, example_spec: dict[str, Any], changes: dict[str, Any], field: str
) -> None:
    response = client.post("/v1/experiments", json={**example_spec, **changes})

    assert response.status_code == 422
    assert [f["field"] for f in response.json()["error"]["fields"]] == [field]


def test_the_published_spec_schema_shows_tags_and_notes(client: TestClient) -> None:
    components = client.get("/openapi.json").json()["components"]["schemas"]
    envelope = components["SpecEnvelope"]["properties"]

    assert envelope["tags"]["maxItems"] == 20
    assert envelope["tags"]["items"]["pattern"] == "^[A-Za-z0-9_.:-]+$"
    assert envelope["notes"]["maxLength"] == 10_000
    assert set(components["SpecEdit"]["properties"]) == {"name", "tags", "notes"}


def test_patch_edits_name_tags_and_notes_everywhere_and_logs_who(
    client: TestClient, example_spec: dict[str, Any], session: Session
) -> None:
    created = _submit(client, example_spec, tags=["old"])

    response = client.patch(
        f"/v1/experiments/{created['id']}",
        json={"name": "renamed", "tags": ["new", "paper.fig2"], "notes": "peaks at 40k"},
    )

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["name"] == body["spec"]["name"] == "renamed"
    assert body["spec"]["tags"] == ["new", "paper.fig2"]
    assert body["spec"]["notes"] == "peaks at 40k"
    # Everything else of the spec is as submitted.
    assert {k: v for k, v in body["spec"].items() if k not in {"name", "tags", "notes"}} == {
        k: v for k, v in created["spec"].items() if k not in {"name", "tags", "notes"}
    }
    read = client.get(f"/v1/experiments/{created['id']}").json()
    assert (read["name"], read["spec"]) == (body["name"], body["spec"])
    tags = session.scalars(
        select(ExperimentTag.tag).where(ExperimentTag.experiment_id == created["id"])
    ).all()
    assert sorted(tags) == ["new", "paper.fig2"]
    logs = session.scalars(
        select(ExperimentEvent.payload).where(
            ExperimentEvent.experiment_id == created["id"], ExperimentEvent.kind == "log"
        )
    ).all()
    assert any("name, notes, tags edited by" in entry["message"] for entry in logs)


def test_patch_changes_only_what_it_names(client: TestClient, example_spec: dict[str, Any]) -> None:
    created = _submit(client, example_spec, tags=["keep"], notes="keep me")

    body = client.patch(f"/v1/experiments/{created['id']}", json={"tags": []}).json()

    assert body["spec"]["tags"] == [] and body["spec"]["notes"] == "keep me"
    assert body["name"] == example_spec["name"]
    assert _listed(client, tag="keep") == []


@pytest.mark.parametrize(
    ("edit", "field", "words"),
    [
        ({"total_steps": 10}, "total_steps", "cannot be changed"),
        ({"name": "ok", "hyperparameters": {}}, "hyperparameters", "cannot be changed"),
        ({"name": ""}, "name", "at least 1"),
        ({"name": None}, "name", "string"),
        ({"tags": ["a b"]}, "tags.0", "pattern"),
        ([], "body", "JSON object"),
    ],
)
def test_a_bad_edit_is_a_422_naming_the_field_and_changes_nothing(
    client: TestClient,
    example_spec: dict[str, Any],
    edit: Any,
    field: str,
    words: str,
) -> None:
    created = _submit(client, example_spec)

    response = client.patch(f"/v1/experiments/{created['id']}", json=edit)

    assert response.status_code == 422, response.text
    problems = response.json()["error"]["fields"]
    assert [p["field"] for p in problems] == [field]
    assert words in problems[0]["reason"]
    assert client.get(f"/v1/experiments/{created['id']}").json()["spec"] == created["spec"]


def test_an_empty_edit_changes_nothing(client: TestClient, example_spec: dict[str, Any]) -> None:
    created = _submit(client, example_spec)
    response = client.patch(f"/v1/experiments/{created['id']}", json={})
    assert response.status_code == 200
    assert response.json()["spec"] == created["spec"]
    assert response.json()["updated_at"] == created["updated_at"]


def test_a_viewer_may_not_edit(
    client: TestClient, example_spec: dict[str, Any], keys: dict[str, str]
) -> None:
    created = _submit(client, example_spec)
    response = client.patch(
        f"/v1/experiments/{created['id']}", json={"name": "x"}, headers=bearer(keys["viewer"])
    )
    assert response.status_code == 403


def test_the_list_filters_by_exact_tag_and_name_substring(
    client: TestClient, example_spec: dict[str, Any]
) -> None:
    _submit(client, example_spec, name="MAPPO lr 3e-4", tags=["lr:3e-4", "sweep"])
    _submit(client, example_spec, name="mappo lr 1e-3", tags=["lr:1e-3", "sweep"])
    _submit(client, example_spec, name="ddpg 100%_done", tags=["lr:3e-4x"])

    assert _listed(client, tag="lr:3e-4") == ["MAPPO lr 3e-4"]
    assert _listed(client, tag="sweep") == ["mappo lr 1e-3", "MAPPO lr 3e-4"]
    assert _listed(client, q="Mappo") == ["mappo lr 1e-3", "MAPPO lr 3e-4"]
    assert _listed(client, q="Mappo", tag="lr:1e-3") == ["mappo lr 1e-3"]
    # LIKE's wildcards are plain text here.
    assert _listed(client, q="%_") == ["ddpg 100%_done"]
    assert _listed(client, q="_") == ["ddpg 100%_done"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"tag": "a b"}, "tag"),
        ({"tag": ""}, "tag"),
        ({"q": ""}, "q"),
        # PostgreSQL's text cannot hold NUL: refused before it reaches SQL (it was a 500).
        ({"q": "ab\x00c"}, "q"),
        ({"sweep_id": "not-an-id"}, "sweep_id"),
    ],
)
def test_bad_list_filters_are_422_naming_the_parameter(
    client: TestClient, params: dict[str, str], field: str
) -> None:
    response = client.get("/v1/experiments", params=params)
    assert response.status_code == 422
    assert [f["field"] for f in response.json()["error"]["fields"]] == [field]
