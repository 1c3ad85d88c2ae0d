"""Keys, roles and projects over HTTP. Every route of the app is walked, so a route added later is
held to the same rules without a new test: no key or a bad or revoked key is 401, a role that may
not do this is 403, and another project's resource is 404, exactly like one that does not exist."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.app import create_app
from core.models import ApiKey, Experiment, StatusTransition
from core.settings import Settings
from tests.auth_support import bearer

pytestmark = pytest.mark.integration

OPEN_ROUTES = {"/healthz", "/readyz", "/metrics", "/v1/algorithms", "/v1/session"}
SAFE = {"GET", "HEAD"}


def _project_routes() -> list[tuple[str, str]]:
    # The app's own OpenAPI document lists every route it serves (the dashboard's static files
    # aside), so a route added later is walked too.
    with tempfile.TemporaryDirectory() as var_dir:
        schema = create_app(Settings(var_dir=Path(var_dir))).openapi()
    return [
        (method.upper(), path)
        for path, operations in schema["paths"].items()
        if path not in OPEN_ROUTES
        for method in operations
    ]


PROJECT_ROUTES = _project_routes()


@pytest.fixture
def experiment(
    anonymous: TestClient, keys: dict[str, str], example_spec: dict[str, Any]
) -> dict[str, Any]:
    """A queued experiment of project team-a (the client itself stays without a key)."""
    response = anonymous.post("/v1/experiments", json=example_spec, headers=bearer(keys["member"]))
    assert response.status_code == 201
    body: dict[str, Any] = response.json()
    return body


@pytest.fixture
def match_id(anonymous: TestClient, keys: dict[str, str]) -> str:
    """A queued match of project team-a."""
    response = anonymous.post(
        "/v1/matches",
        json={"env": {"id": "simple_tag_v3"}, "teams": {"adversary": "random", "agent": "random"}},
        headers=bearer(keys["member"]),
    )
    assert response.status_code == 201, response.text
    value: str = response.json()["id"]
    return value


@pytest.fixture
def sweep_id(anonymous: TestClient, keys: dict[str, str], example_spec: dict[str, Any]) -> str:
    """A sweep of project team-a (two runs of the example spec)."""
    base = {k: v for k, v in example_spec.items() if k != "seed"}
    response = anonymous.post(
        "/v1/sweeps", json={"base": base, "seeds": 2}, headers=bearer(keys["member"])
    )
    assert response.status_code == 201, response.text
    value: str = response.json()["id"]
    return value


def _url(path: str, experiment_id: str, key_id: str, match_id: str = "", sweep_id: str = "") -> str:
    values = {
        "experiment_id": experiment_id,
        "match_id": match_id,
        "sweep_id": sweep_id,
        "checkpoint_id": "01JAAAAAAAAAAAAAAAAAAAAAAA",
        "project": "team-a",
        "key_id": key_id,
    }
    url = re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], path)
    if path == "/v1/metrics":
        url += f"?experiment_ids={experiment_id}"
    return url


def _call(client: TestClient, method: str, url: str, key: str | None) -> Any:
    headers = bearer(key) if key is not None else {}
    body = {"name": "x", "role": "viewer"} if method == "POST" and url.endswith("/keys") else None
    return client.request(method, url, headers=headers, json=body)


def test_the_walk_covers_every_kind_of_route() -> None:
    paths = {p for _, p in PROJECT_ROUTES}
    assert {
        "/v1/experiments",
        "/v1/experiments/{experiment_id}",
        "/v1/experiments/{experiment_id}/cancel",
        "/v1/experiments/{experiment_id}/events",
        "/v1/experiments/{experiment_id}/checkpoints/{checkpoint_id}/file",
        "/v1/metrics",
        "/v1/whoami",
        "/v1/projects/{project}/keys",
        "/v1/projects/{project}/keys/{key_id}",
        "/v1/matches",
        "/v1/matches/{match_id}",
        "/v1/matches/{match_id}/replay.gif",
        "/v1/matches/{match_id}/cancel",
        "/v1/sweeps",
        "/v1/sweeps/{sweep_id}",
        "/v1/sweeps/{sweep_id}/cancel",
        "/v1/sweeps/{sweep_id}/summary.csv",
        "/v1/workers",
    } <= paths


@pytest.mark.parametrize(("method", "path"), PROJECT_ROUTES)
def test_no_key_a_bad_key_and_a_revoked_key_are_401(
    anonymous: TestClient,
    keys: dict[str, str],
    experiment: dict[str, Any],
    match_id: str,
    sweep_id: str,
    session: Session,
    method: str,
    path: str,
) -> None:
    key_id = session.scalars(select(ApiKey.id)).first() or ""
    url = _url(path, experiment["id"], key_id, match_id, sweep_id)
    revoked = anonymous.post(
        "/v1/projects/team-a/keys", json={"name": "soon gone", "role": "admin"},
        headers=bearer(keys["admin"]),
    ).json()  # fmt: skip
    gone = anonymous.delete(
        f"/v1/projects/team-a/keys/{revoked['key']['id']}", headers=bearer(keys["admin"])
    )
    assert gone.status_code == 200

    for key in (None, "mfk_" + "x" * 43, "not-even-a-key", revoked["token"]):
        response = _call(anonymous, method, url, key)
        assert response.status_code == 401, (key, response.text)
        assert response.json()["error"]["code"] == "unauthenticated"
        assert response.headers["www-authenticate"].startswith("Bearer")
    malformed = anonymous.request(method, url, headers={"authorization": "Basic dXNlcjpwYXNz"})
    assert malformed.status_code == 401


@pytest.mark.parametrize(("method", "path"), [(m, p) for m, p in PROJECT_ROUTES if m not in SAFE])
def test_a_viewer_may_not_change_anything(
    anonymous: TestClient,
    keys: dict[str, str],
    experiment: dict[str, Any],
    sweep_id: str,
    match_id: str,
    session: Session,
    method: str,
    path: str,
) -> None:
    key_id = session.scalars(select(ApiKey.id)).first() or ""
    url = _url(path, experiment["id"], key_id, match_id=match_id, sweep_id=sweep_id)

    response = _call(anonymous, method, url, keys["viewer"])

    assert response.status_code == 403, response.text
    assert response.json()["error"]["code"] == "forbidden"
    assert "viewer" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("method", "path"),
    [(m, p) for m, p in PROJECT_ROUTES if "{" in p or p == "/v1/metrics"],
)
def test_another_projects_resource_is_404(
    anonymous: TestClient,
    keys: dict[str, str],
    experiment: dict[str, Any],
    match_id: str,
    sweep_id: str,
    session: Session,
    method: str,
    path: str,
) -> None:
    # team-b's admin may do anything in team-b, and nothing at all with team-a's resources.
    team_a_key = session.scalars(select(ApiKey.id)).first() or ""
    url = _url(path, experiment["id"], team_a_key, match_id, sweep_id)

    response = _call(anonymous, method, url, keys["other_admin"])

    assert response.status_code == 404, response.text
    assert response.json()["error"]["code"] == "not_found"


def test_roles_allow_what_they_name(
    client: TestClient, keys: dict[str, str], example_spec: dict[str, Any]
) -> None:
    created = client.post("/v1/experiments", json=example_spec).json()
    as_viewer = bearer(keys["viewer"])
    as_member = bearer(keys["member"])

    assert client.get(f"/v1/experiments/{created['id']}", headers=as_viewer).status_code == 200
    assert (
        client.get("/v1/experiments", headers=as_viewer).json()["items"][0]["id"] == created["id"]
    )
    assert client.post("/v1/experiments", json=example_spec, headers=as_viewer).status_code == 403
    assert client.get("/v1/projects/team-a/keys", headers=as_member).status_code == 403
    assert (
        client.post(f"/v1/experiments/{created['id']}/cancel", headers=as_member).status_code == 200
    )
    listed = client.get("/v1/projects/team-a/keys", headers=bearer(keys["admin"]))
    assert listed.status_code == 200
    assert {k["role"] for k in listed.json()["items"]} == {"viewer", "member", "admin"}


def test_a_project_sees_only_its_own_experiments(
    client: TestClient, keys: dict[str, str], example_spec: dict[str, Any]
) -> None:
    ours = client.post("/v1/experiments", json=example_spec).json()
    theirs = client.post("/v1/experiments", json=example_spec, headers=bearer(keys["other"])).json()

    mine = [e["id"] for e in client.get("/v1/experiments").json()["items"]]
    others = [
        e["id"]
        for e in client.get("/v1/experiments", headers=bearer(keys["other"])).json()["items"]
    ]

    assert ours["id"] in mine and theirs["id"] not in mine
    assert theirs["id"] in others and ours["id"] not in others
    both = client.get("/v1/metrics", params={"experiment_ids": f"{ours['id']},{theirs['id']}"})
    assert both.status_code == 404
    assert theirs["id"] in both.json()["error"]["message"]


def test_a_key_is_shown_once_stored_hashed_and_revoked_from_the_next_request(
    client: TestClient, keys: dict[str, str], session: Session
) -> None:
    admin = bearer(keys["admin"])
    created = client.post(
        "/v1/projects/team-a/keys", json={"name": "ci runner", "role": "member"}, headers=admin
    )
    assert created.status_code == 201
    token = created.json()["token"]
    key = created.json()["key"]
    assert re.fullmatch(r"mfk_[A-Za-z0-9_-]{43}", token)
    assert key["prefix"] == token[:12] and key["role"] == "member"
    row = session.get(ApiKey, key["id"])
    assert row is not None and token not in row.token_hash and len(row.token_hash) == 64
    listed = client.get("/v1/projects/team-a/keys", headers=admin).text
    assert token not in listed

    me = client.get("/v1/whoami", headers=bearer(token)).json()
    assert me["project"] == "team-a" and me["key"]["name"] == "ci runner" and me["via"] == "key"
    assert me["key"]["last_used_at"] is not None

    revoked = client.delete(f"/v1/projects/team-a/keys/{key['id']}", headers=admin)
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    assert client.get("/v1/whoami", headers=bearer(token)).status_code == 401
    # Revoked keys stay listed for the audit trail.
    ids = [k["id"] for k in client.get("/v1/projects/team-a/keys", headers=admin).json()["items"]]
    assert key["id"] in ids


def test_bad_key_requests_name_their_field(client: TestClient, keys: dict[str, str]) -> None:
    admin = bearer(keys["admin"])
    response = client.post(
        "/v1/projects/team-a/keys", json={"name": "", "role": "owner"}, headers=admin
    )
    assert response.status_code == 422
    assert {f["field"] for f in response.json()["error"]["fields"]} == {"name", "role"}
    unknown = client.delete("/v1/projects/team-a/keys/01JAAAAAAAAAAAAAAAAAAAAAAA", headers=admin)
    assert unknown.status_code == 404


def test_submit_cancel_and_resume_record_the_key_that_asked(
    client: TestClient, keys: dict[str, str], example_spec: dict[str, Any], session: Session
) -> None:
    member_id = client.get("/v1/whoami").json()["key"]["id"]
    created = client.post("/v1/experiments", json=example_spec).json()
    admin = bearer(keys["admin"])
    admin_id = client.get("/v1/whoami", headers=admin).json()["key"]["id"]
    client.post(f"/v1/experiments/{created['id']}/cancel", headers=admin)
    client.post(f"/v1/experiments/{created['id']}/resume")

    row = session.get(Experiment, created["id"])
    assert row is not None and row.created_by_key_id == member_id
    assert created["created_by_key_id"] == member_id
    timeline = client.get(f"/v1/experiments/{created['id']}/timeline").json()["items"]
    assert [(t["to_status"], t["actor_key_id"]) for t in timeline] == [
        ("queued", member_id),
        ("cancelled", admin_id),
        ("queued", member_id),
    ]
    assert "by key 'admin'" in timeline[1]["reason"]
    stored = session.scalars(
        select(StatusTransition.actor_key_id).where(StatusTransition.experiment_id == created["id"])
    ).all()
    assert list(stored) == [member_id, admin_id, member_id]


def test_the_openapi_document_says_which_routes_need_a_key() -> None:
    """Every route that needs a key declares the bearer key or the session cookie (either does),
    so client generators and fuzzers (schemathesis's auth checks) see it; the open ones declare
    nothing."""
    with tempfile.TemporaryDirectory() as var_dir:
        schema = create_app(Settings(var_dir=Path(var_dir))).openapi()
    assert schema["components"]["securitySchemes"]["apiKey"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "An API key of the project: `Authorization: Bearer mfk_...`.",
    }
    assert schema["components"]["securitySchemes"]["session"]["in"] == "cookie"
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            declared = operation.get("security")
            if path in OPEN_ROUTES:
                assert declared is None, (method, path)
            else:
                assert declared == [{"apiKey": []}, {"session": []}], (method, path)
    assert len(PROJECT_ROUTES) > 30


def test_open_routes_need_no_key(anonymous: TestClient) -> None:
    assert anonymous.get("/healthz").status_code == 200
    assert anonymous.get("/v1/algorithms").status_code == 200
    assert anonymous.get("/").status_code == 200
    assert anonymous.get("/static/js/app.js").status_code == 200


def test_a_session_cookie_signs_the_dashboard_in_and_out(
    anonymous: TestClient, keys: dict[str, str]
) -> None:
    signed_in = anonymous.post("/v1/session", json={"credential": keys["viewer"]})
    assert signed_in.status_code == 200 and signed_in.json()["role"] == "viewer"
    cookie = signed_in.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and keys["viewer"] not in cookie
    assert anonymous.get("/v1/whoami").json()["via"] == "session"

    out = anonymous.delete("/v1/session")
    assert out.status_code == 204
    anonymous.cookies.clear()
    assert anonymous.get("/v1/whoami").status_code == 401
    bad = anonymous.post("/v1/session", json={"credential": "mfk_nope"})
    assert bad.status_code == 401


def test_a_write_with_the_cookie_must_come_from_the_same_origin(
    anonymous: TestClient, keys: dict[str, str], example_spec: dict[str, Any]
) -> None:
    anonymous.post("/v1/session", json={"credential": keys["member"]})
    evil = {"origin": "http://evil.example"}

    cross = anonymous.post("/v1/experiments", json=example_spec, headers=evil)
    same = anonymous.post(
        "/v1/experiments", json=example_spec, headers={"origin": "http://testserver"}
    )

    assert cross.status_code == 403 and cross.json()["error"]["code"] == "cross_origin"
    assert same.status_code == 201
    site = anonymous.post(
        f"/v1/experiments/{same.json()['id']}/cancel", headers={"sec-fetch-site": "cross-site"}
    )
    assert site.status_code == 403
    assert anonymous.get(f"/v1/experiments/{same.json()['id']}").json()["status"] == "queued"


def test_a_one_time_login_token_works_once(
    anonymous: TestClient, settings: Any, session: Session, keys: dict[str, str]
) -> None:
    from core import auth
    from core.auth.tokens import server_secret

    key = session.scalars(select(ApiKey).where(ApiKey.name == "admin")).one()
    token = auth.create_login_token(session, server_secret(settings), key)
    session.commit()

    first = anonymous.post("/v1/session", json={"credential": token})
    again = anonymous.post("/v1/session", json={"credential": token})

    assert first.status_code == 200 and first.json()["role"] == "admin"
    assert again.status_code == 401
