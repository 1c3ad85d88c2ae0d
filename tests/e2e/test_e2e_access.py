"""Access on a real ``marlforge api`` process, where only a real server shows it.

An open event stream ends once its key is revoked or its session signed out (no worker: the run
stays queued, so its stream would stay open to the run's end, up to the run time limit). The
stream's last event is ``error`` (``unauthenticated``), within a few seconds
(``BusConfig.recheck_s``, 5 s), and a reconnect is answered 401. A body that declares a length over
the limit is refused on its word, before the client has sent a byte of it."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from e2e_support import Api, ServiceProcess, create_key, free_port, service_env

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.integration]

ENDS_WITHIN_S = 10.0


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, pg_url: str, redis_url: str, queue_prefix: str
) -> Iterator[tuple[Api, dict[str, str]]]:
    folder = tmp_path_factory.mktemp("revocation")
    env = service_env(
        {
            "MARLFORGE_DATABASE_URL": pg_url,
            "MARLFORGE_BROKER_URL": redis_url,
            "MARLFORGE_QUEUE_PREFIX": f"{queue_prefix}revocation.",
            "MARLFORGE_VAR_DIR": str(folder / "var"),
            "MARLFORGE_ARTIFACTS_DIR": str(folder / "artifacts"),
        }
    )
    port = free_port()
    process = ServiceProcess(
        ["api", "--host", "127.0.0.1", "--port", str(port)], env, folder / "api.log"
    )
    admin = Api(f"http://127.0.0.1:{port}", create_key(env, role="admin"))
    try:
        admin.wait_ready(process=process)
        yield admin, env
    finally:
        admin.http.close()
        process.stop()


def _new_key(admin: Api, name: str) -> tuple[str, str]:
    created = admin.http.post("/v1/projects/default/keys", json={"name": name, "role": "viewer"})
    assert created.status_code == 201, created.text
    body = created.json()
    return body["key"]["id"], body["token"]


def _ends_after(stream: httpx.Response, cut: Callable[[], None]) -> tuple[list[str], float]:
    """Read the stream's first events, ``cut`` its credential, then read to its end: the lines
    after the cut and how long the stream lasted after it."""
    lines = stream.iter_lines()
    while next(lines) != "event: status":  # the history's first event
        pass
    cut()
    started = time.monotonic()
    try:
        after = list(lines)  # to the end: the server closes it
    except httpx.ReadTimeout:  # nothing for ENDS_WITHIN_S (the keep-alive comes every 15 s)
        pytest.fail(f"the stream was still open {ENDS_WITHIN_S} s after its credential went")
    return after, time.monotonic() - started


def test_a_revoked_keys_stream_ends_within_seconds(
    stack: tuple[Api, dict[str, str]], tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    admin, _ = stack
    run = admin.submit(tiny_spec(name="watched"))["id"]
    key_id, token = _new_key(admin, "watcher")
    headers = {"authorization": f"Bearer {token}"}
    with (
        httpx.Client(base_url=str(admin.http.base_url), timeout=ENDS_WITHIN_S) as http,
        http.stream("GET", f"/v1/experiments/{run}/events", headers=headers) as stream,
    ):
        assert stream.status_code == 200

        def revoke() -> None:
            answer = admin.http.delete(f"/v1/projects/default/keys/{key_id}")
            assert answer.status_code == 200, answer.text

        after, lasted = _ends_after(stream, revoke)
    assert lasted < ENDS_WITHIN_S
    assert "event: error" in after and any('"unauthenticated"' in line for line in after)
    again = httpx.get(f"{admin.http.base_url}/v1/experiments/{run}/events", headers=headers)
    assert again.status_code == 401
    admin.http.post(f"/v1/experiments/{run}/cancel")


def test_a_signed_out_sessions_stream_ends_within_seconds(
    stack: tuple[Api, dict[str, str]], tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    admin, _ = stack
    run = admin.submit(tiny_spec(name="watched in the dashboard"))["id"]
    _, token = _new_key(admin, "dashboard")
    base = str(admin.http.base_url)
    with httpx.Client(base_url=base, timeout=ENDS_WITHIN_S) as browser:
        signed_in = browser.post("/v1/session", json={"credential": token})
        assert signed_in.status_code == 200, signed_in.text
        with browser.stream("GET", f"/v1/experiments/{run}/events") as stream:
            assert stream.status_code == 200

            def sign_out() -> None:
                # Another tab of the same browser signs out (the origin check of cookie writes).
                answer = browser.request("DELETE", "/v1/session", headers={"origin": base})
                assert answer.status_code == 204, answer.text

            cookie = browser.cookies.get("marlforge_session")
            after, lasted = _ends_after(stream, sign_out)
        assert lasted < ENDS_WITHIN_S
        assert "event: error" in after
    # The old cookie no longer opens a stream.
    again = httpx.get(
        f"{base}/v1/experiments/{run}/events", cookies={"marlforge_session": cookie or ""}
    )
    assert again.status_code == 401
    admin.http.post(f"/v1/experiments/{run}/cancel")


def test_a_body_declared_too_large_is_refused_before_it_is_sent(
    stack: tuple[Api, dict[str, str]],
) -> None:
    admin, _ = stack
    url = httpx.URL(str(admin.http.base_url))
    token = admin.http.headers["authorization"]
    head = (
        "POST /v1/experiments HTTP/1.1\r\n"
        f"Host: {url.host}:{url.port}\r\n"
        f"Authorization: {token}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {2 << 30}\r\n\r\n"
    )
    with socket.create_connection((url.host, url.port), timeout=5) as connection:
        connection.sendall(head.encode())  # and not a byte of the 2 GiB it announces
        started = time.monotonic()
        received = b""
        while b"too_large" not in received and (chunk := connection.recv(65536)):
            received += chunk
        answer = received.decode(errors="replace")
    assert answer.startswith("HTTP/1.1 413"), answer[:200]
    assert '"too_large"' in answer
    assert time.monotonic() - started < 2
