"""What keeps a browser from being turned against the API: JSON-only bodies, refused cross-origin
writes and the security headers on every response (``api/security.py``)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from api.app import create_app
from core.settings import Settings
from core.storage import FilesystemStore

pytestmark = pytest.mark.integration

HEADERS = {
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
}


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None],
)
def test_a_body_that_is_not_declared_json_is_415_and_stores_nothing(
    client: TestClient, example_spec: dict[str, Any], content_type: str | None
) -> None:
    headers = {"content-type": content_type} if content_type else {}
    if content_type is None:
        client.headers.pop("content-type", None)

    response = client.post("/v1/experiments", content=json.dumps(example_spec), headers=headers)

    assert response.status_code == 415, response.text
    assert response.json()["error"]["code"] == "unsupported_media_type"
    assert client.get("/v1/experiments").json()["items"] == []


def test_json_with_a_charset_or_a_json_suffix_is_accepted(
    client: TestClient, example_spec: dict[str, Any]
) -> None:
    for content_type in ("application/json; charset=utf-8", "application/merge-patch+json"):
        response = client.post(
            "/v1/experiments",
            content=json.dumps(example_spec),
            headers={"content-type": content_type},
        )
        assert response.status_code == 201, response.text


def test_a_cross_origin_write_is_refused_whatever_it_carries(
    client: TestClient, example_spec: dict[str, Any]
) -> None:
    created = client.post("/v1/experiments", json=example_spec).json()

    # A body-less cross-origin POST (what an <img> or a fetch with mode no-cors can send).
    cancel = client.post(
        f"/v1/experiments/{created['id']}/cancel", headers={"origin": "http://evil.example"}
    )
    submit = client.post(
        "/v1/experiments", json=example_spec, headers={"origin": "http://evil.example"}
    )

    assert cancel.status_code == 403 and cancel.json()["error"]["code"] == "cross_origin"
    assert submit.status_code == 403
    assert client.get(f"/v1/experiments/{created['id']}").json()["status"] == "queued"
    assert len(client.get("/v1/experiments").json()["items"]) == 1
    # Reads from another origin are not writes; the same origin may write.
    assert (
        client.get("/v1/experiments", headers={"origin": "http://evil.example"}).status_code == 200
    )
    same = client.post(
        f"/v1/experiments/{created['id']}/cancel", headers={"origin": "http://testserver"}
    )
    assert same.status_code == 200


@pytest.mark.parametrize(
    "path",
    ["/", "/static/js/app.js", "/healthz", "/v1/experiments", "/v1/nowhere", "/openapi.json"],
)
def test_every_response_carries_the_security_headers(anonymous: TestClient, path: str) -> None:
    response = anonymous.get(path)

    for name, value in HEADERS.items():
        assert response.headers[name] == value, (path, name)
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert "unsafe-inline" not in policy


def test_the_interactive_docs_are_off_unless_asked_for(anonymous: TestClient) -> None:
    assert [anonymous.get(path).status_code for path in ("/docs", "/redoc")] == [404, 404]
    assert anonymous.get("/openapi.json").status_code == 200


def test_the_interactive_docs_load_pinned_checked_scripts_and_run_none_inline(
    settings: Settings, session_factory: sessionmaker[Session], storage: FilesystemStore
) -> None:
    app = create_app(
        settings.model_copy(update={"api_docs": True}),
        session_factory=session_factory,
        storage=storage,
    )
    with TestClient(app) as anonymous:
        pages = {path: anonymous.get(path) for path in ("/docs", "/redoc")}
        start = anonymous.get("/docs/start.js")
        home_policy = anonymous.get("/").headers["content-security-policy"]

    for path, page in pages.items():
        assert page.status_code == 200, path
        sources = re.findall(r"<(?:script|link)\b([^>]*)>", page.text)
        external = [s for s in sources if "cdn.jsdelivr.net" in s]
        assert external, path
        for attributes in external:
            # One pinned release each (name@x.y.z), checked by the browser against its sha384.
            assert re.search(r"/npm/[a-z-]+@\d+\.\d+\.\d+/", attributes), attributes
            assert re.search(r'integrity="sha384-[A-Za-z0-9+/=]{64}"', attributes), attributes
        # No inline script: every <script> has a src.
        assert re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", page.text) == [], path
        policy = page.headers["content-security-policy"]
        script_src = next(d for d in policy.split("; ") if d.startswith("script-src"))
        assert script_src == "script-src 'self' https://cdn.jsdelivr.net", path
        assert "frame-ancestors 'none'" in policy
    assert start.status_code == 200 and "SwaggerUIBundle" in start.text
    assert start.headers["content-type"].startswith("text/javascript")
    assert "cdn.jsdelivr.net" not in home_policy
