"""What keeps a browser from being turned against the API: response headers, JSON-only bodies and
same-origin writes.

- Every response carries a Content-Security-Policy that lets the dashboard run only its own
  scripts and styles and never be framed (FastAPI's ``/docs`` pages get one that admits their
  CDN), plus ``nosniff`` and a strict ``Referrer-Policy``. The dashboard escapes what it shows;
  these make that hold even if a later change slips.
- A request with a body must say it is JSON (415 otherwise). An HTML form can only send
  ``text/plain``, ``application/x-www-form-urlencoded`` or ``multipart/form-data``, so no other
  web page can post a spec with a plain form.
- A body larger than ``MAX_BODY_BYTES`` (``MAX_ACT_BODY_BYTES`` for the inference route) is
  refused (413) before the app reads it: one that
  declares a larger ``Content-Length`` before a byte of it is read, one that streams in chunks as
  soon as the bytes read pass the limit.
- A state-changing request from another origin (``Origin`` or ``Sec-Fetch-Site`` says so) is
  refused (403), whatever credentials it carries.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.docs_pages import PATHS as DOCS_PATHS
from api.errors import ErrorDetail, error_json

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
# The interactive docs (api.docs_pages: Swagger UI, ReDoc, when MARLFORGE_API_DOCS is on) load
# one pinned, integrity-checked release of their scripts from jsDelivr and run no inline script;
# their widgets set inline styles. The pages show only the OpenAPI document, never a project's data.
DOCS_CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self' https://cdn.jsdelivr.net; "
    "style-src 'self' 'unsafe-inline' https://cdn.jsdelivr.net; img-src 'self' data:; "
    "font-src 'self' data:; worker-src 'self' blob:; connect-src 'self'; object-src 'none'; "
    "base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS: list[tuple[bytes, bytes]] = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
]
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
MAX_BODY_BYTES = 1 << 20
MAX_ACT_BODY_BYTES = 8 << 20
"""The inference route's bodies (``POST .../checkpoints/{cid}/act``): a batch of 1,024
observations of a few hundred numbers each is several MiB of JSON."""
_ACT_PATH = re.compile(r"^/v1/experiments/[^/]+/checkpoints/[^/]+/act$")


def body_limit(path: str) -> int:
    """The most bytes a request body to ``path`` may have."""
    return MAX_ACT_BODY_BYTES if _ACT_PATH.match(path) else MAX_BODY_BYTES


def same_origin(headers: Headers) -> bool:
    """True unless the request says it comes from another origin than the host it was sent to.

    Non-browser clients send neither ``Origin`` nor ``Sec-Fetch-Site``; browsers send at least one
    on every cross-origin write.
    """
    if headers.get("sec-fetch-site", "same-origin") not in {"same-origin", "none"}:
        return False
    origin = headers.get("origin")
    if origin is None:
        return True
    return urlsplit(origin).netloc.lower() == headers.get("host", "").lower()


def is_json(content_type: str) -> bool:
    """True for ``application/json`` and ``application/*+json``, with any parameters."""
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


async def _bounded_body(receive: Receive, limit: int) -> tuple[Receive, ASGIApp | None]:
    """Read the whole body (at most ``limit`` bytes) and hand it on; a 413 when it is larger."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break  # the client went away; the app sees the same
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            detail = ErrorDetail(code="too_large", message=f"the body is larger than {limit} bytes")
            return receive, error_json(413, detail)
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    delivered = False

    async def replay() -> Message:
        nonlocal delivered
        if delivered:
            return await receive()  # http.disconnect when the client leaves
        delivered = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay, None


def _declared_length(headers: Headers) -> int:
    """The body's ``Content-Length`` (0 when it declares none or a malformed one: the body is then
    counted as it is read)."""
    length = headers.get("content-length", "").strip()
    return int(length) if length.isdigit() and len(length) <= 20 else 0


def _has_body(headers: Headers) -> bool:
    length = headers.get("content-length")
    if headers.get("transfer-encoding") is not None:
        return True
    return length is not None and length.strip() not in {"", "0"}


class BrowserSafety:
    """ASGI middleware: the headers on every response, and the refusals above."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        policy = (
            DOCS_CONTENT_SECURITY_POLICY if scope["path"] in DOCS_PATHS else CONTENT_SECURITY_POLICY
        )
        headers = [(b"content-security-policy", policy.encode()), *SECURITY_HEADERS]

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name for name, _ in message.get("headers", [])}
                extra = [(n, v) for n, v in headers if n not in names]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        refusal = self._refusal(scope)
        if refusal is None and scope["method"] in UNSAFE_METHODS:
            receive, refusal = await _bounded_body(receive, body_limit(scope["path"]))
        if refusal is not None:
            await refusal(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)

    @staticmethod
    def _refusal(scope: Scope) -> ASGIApp | None:
        headers = Headers(scope=scope)
        method = scope["method"]
        if method in UNSAFE_METHODS and not same_origin(headers):
            return error_json(
                403,
                ErrorDetail(
                    code="cross_origin",
                    message="a state-changing request from another origin is refused",
                ),
            )
        content_type = headers.get("content-type")
        if method in UNSAFE_METHODS and (
            (content_type is not None and not is_json(content_type))
            or (content_type is None and _has_body(headers))
        ):
            return error_json(
                415,
                ErrorDetail(
                    code="unsupported_media_type",
                    message="request bodies must be JSON: send 'Content-Type: application/json'",
                ),
            )
        limit = body_limit(scope["path"])
        if method in UNSAFE_METHODS and _declared_length(headers) > limit:
            # Refused on its word, before a byte of the body is read.
            return error_json(
                413, ErrorDetail(code="too_large", message=f"the body is larger than {limit} bytes")
            )
        return None
