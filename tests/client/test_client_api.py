"""``client.api.Client`` against a scripted server (httpx's MockTransport): what a live server
rarely shows on demand, a stream that breaks mid-run, a presigned redirect, a corrupt download."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from client import ApiError, Client

KEY = "mfk_" + "k" * 43
RUN = "01" + "A" * 24


def _sse(*frames: str) -> bytes:
    return ("retry: 2000\n\n" + "".join(frames)).encode()


def test_watch_reconnects_after_the_last_event_it_saw() -> None:
    seen_ids: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen_ids.append(request.headers.get("last-event-id"))
        if len(seen_ids) == 1:  # the first connection breaks after event 7
            frames = _sse('id: 7\nevent: progress\ndata: {"step": 4, "total_steps": 8}\n\n')
            return httpx.Response(200, stream=_Broken(frames))
        if len(seen_ids) == 2:  # the second ends cleanly without ``end`` (an API shutting down)
            body = _sse(
                ": keep-alive\n\n",
                'id: 8\nevent: status\ndata: {"from": "running", "to": "succeeded"}\n\n',
            )
        else:
            body = _sse('event: end\ndata: {"status": "succeeded"}\n\n')
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    with Client("http://api", KEY, transport=httpx.MockTransport(handler)) as client:
        events = list(client.watch(RUN))
    assert [(e.id, e.kind) for e in events] == [(7, "progress"), (8, "status"), (None, "end")]
    assert seen_ids == [None, "7", "8"]


class _Broken(httpx.SyncByteStream):
    def __init__(self, head: bytes) -> None:
        self.head = head

    def __iter__(self) -> Iterator[bytes]:
        yield self.head
        raise httpx.RemoteProtocolError("peer closed connection")


def _checkpoint_server(
    body: bytes, listed_sha: str, store_headers: list[dict[str, str]]
) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "store":
            store_headers.append(dict(request.headers))
            return httpx.Response(200, content=body)
        assert request.headers["authorization"] == f"Bearer {KEY}"
        if request.url.path.endswith("/checkpoints"):
            items = [
                {"id": "c1", "step": 100, "size_bytes": 1, "sha256": "0" * 64},
                {"id": "c2", "step": 200, "size_bytes": len(body), "sha256": listed_sha},
            ]
            return httpx.Response(200, json={"items": items})
        assert request.url.path == f"/v1/experiments/{RUN}/checkpoints/c2/file"
        return httpx.Response(
            307, headers={"location": "https://store/bucket/c2?X-Amz-Signature=s"}
        )

    return httpx.MockTransport(handler)


def test_download_follows_the_presigned_redirect_without_the_key(tmp_path: Path) -> None:
    body = b"safetensors bytes" * 1000
    store_headers: list[dict[str, str]] = []
    transport = _checkpoint_server(body, hashlib.sha256(body).hexdigest(), store_headers)
    with Client("http://api", KEY, transport=transport) as client:
        entry = client.download(RUN, tmp_path / "policy.safetensors")  # latest: step 200
    assert entry["id"] == "c2"
    assert (tmp_path / "policy.safetensors").read_bytes() == body
    assert len(store_headers) == 1 and "authorization" not in store_headers[0]
    assert KEY not in json.dumps(store_headers)


def test_a_download_whose_sha256_differs_leaves_no_file(tmp_path: Path) -> None:
    transport = _checkpoint_server(b"tampered", "f" * 64, [])
    with Client("http://api", KEY, transport=transport) as client, pytest.raises(ApiError) as err:
        client.download(RUN, tmp_path / "policy.safetensors", checkpoint_id="c2")
    assert err.value.code == "checksum_mismatch"
    assert list(tmp_path.iterdir()) == []


def test_an_api_error_carries_status_code_message_and_fields() -> None:
    problem = {"field": "hyperparameters.tau", "reason": "Input should be less than or equal to 1"}
    error = {"code": "invalid_spec", "message": "the spec is invalid", "fields": [problem]}

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["idempotency-key"] == "k-1"
        return httpx.Response(422, json={"error": error})

    transport = httpx.MockTransport(handler)
    with Client("http://api", KEY, transport=transport) as client, pytest.raises(ApiError) as err:
        client.submit({"name": "x"}, idempotency_key="k-1")
    assert (err.value.status, err.value.code) == (422, "invalid_spec")
    assert [(f.field, f.reason) for f in err.value.fields] == [tuple(problem.values())]
    assert KEY not in repr(client) + str(err.value)


def test_a_saved_key_goes_only_to_its_own_server(tmp_path: Path) -> None:
    from client import config

    env = {"XDG_CONFIG_HOME": str(tmp_path)}
    config.save(config.Credentials("http://a:8000", KEY), env)
    assert config.load(env) == config.Credentials("http://a:8000", KEY)
    assert config.load({**env, "MARLFORGE_URL": "http://a:8000/"}).key == KEY
    with pytest.raises(config.MissingCredentials, match="MARLFORGE_API_KEY"):
        config.load({**env, "MARLFORGE_URL": "http://elsewhere"})
    other = config.load({**env, "MARLFORGE_API_KEY": "mfk_other"})
    assert (other.url, other.key) == ("http://a:8000", "mfk_other")
    assert KEY not in repr(config.load(env))
