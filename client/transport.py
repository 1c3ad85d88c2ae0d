"""The way to the API: ``Connection``, one MARLForge API (``url``) as one key, its requests and its
streamed files, under ``client.api.Client``'s methods.

Every refusal, from the API (its error body: ``code``, ``message``, ``fields``) or from the way
there (an unreachable server, a download whose sha256 is wrong), is one exception type,
``ApiError``, so a script catches one thing and branches on ``status`` and ``code``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import httpx

Json = dict[str, Any]
JsonList = list[Json]

# Answers the client follows itself: a presigned download URL of the artifact store.
REDIRECTS = {301, 302, 303, 307, 308}
CHUNK = 1 << 20


@dataclass(frozen=True)
class FieldError:
    """One bad field of a request: its dotted path (``hyperparameters.tau``) and why."""

    field: str
    reason: str


@dataclass
class ApiError(Exception):
    """A request that did not succeed. ``status`` is the HTTP status (0: no answer at all);
    ``code`` the API's stable error code (``invalid_spec``, ``not_found``...) or the client's own
    (``unreachable``, ``checksum_mismatch``, ``bad_response``)."""

    status: int
    code: str
    message: str
    fields: list[FieldError] = field(default_factory=list)

    def __str__(self) -> str:
        return f"{self.message} ({self.status} {self.code})" if self.status else self.message


def error_of(response: httpx.Response) -> ApiError:
    """The ``ApiError`` of a refused request: the API's error body, or the status and the start of
    whatever else answered (``bad_response``)."""
    try:
        body = response.json()["error"]
        fields = [FieldError(f["field"], f["reason"]) for f in body.get("fields") or []]
        return ApiError(response.status_code, body["code"], body["message"], fields)
    except (ValueError, KeyError, TypeError):
        text = response.text.strip()[:200] or response.reason_phrase
        message = f"HTTP {response.status_code}: {text}"
        return ApiError(response.status_code, "bad_response", message)


class Connection:
    """One MARLForge API (``url``) as one key (``key``, sent as a Bearer token)."""

    def __init__(
        self,
        url: str,
        key: str,
        *,
        timeout: float = 30,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._transport = transport
        self._http = httpx.Client(
            base_url=self.url,
            headers={"authorization": f"Bearer {key}", "user-agent": "marlforge-client"},
            timeout=timeout,
            transport=transport,
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def __repr__(self) -> str:  # never shows the key
        return f"Client({self.url!r})"

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ApiError(0, "unreachable", f"cannot reach {self.url}: {exc}") from exc
        if response.status_code >= 400:
            raise error_of(response)
        return response

    def _json(self, method: str, path: str, **kwargs: Any) -> Json:
        body: Json = self._request(method, path, **kwargs).json()
        return body

    def _fetch(self, url: str, partial: Path) -> str:
        """Stream ``url`` to ``partial``; its sha256. A redirect to the store is followed with a
        connection of its own, without the key."""
        try:
            with self._http.stream("GET", url) as response:
                if response.status_code in REDIRECTS:
                    # The store's presigned URL carries its own authority: our key stays here.
                    location = response.headers["location"]
                    with (
                        httpx.Client(
                            timeout=self._http.timeout, transport=self._transport
                        ) as store,
                        store.stream("GET", location) as redirected,
                    ):
                        return save(redirected, partial)
                return save(response, partial)
        except httpx.TransportError as exc:
            raise ApiError(0, "unreachable", f"the download broke: {exc}") from exc


def save(response: httpx.Response, partial: Path) -> str:
    """Write a streamed answer's bytes to ``partial``, hashing them as they come; their sha256. A
    refusal raises its ``ApiError`` and writes nothing."""
    if response.status_code >= 400:
        response.read()
        raise error_of(response)
    sha = hashlib.sha256()
    with partial.open("wb") as out:
        for chunk in response.iter_bytes(CHUNK):
            sha.update(chunk)
            out.write(chunk)
    return sha.hexdigest()
