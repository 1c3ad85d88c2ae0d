"""Objects of the artifact store served over HTTP, the same way for every store: streamed in
chunks (the API never holds a file), the recorded sha256 as ``ETag`` (``If-None-Match`` gives
304), one byte ``Range`` (206; a request for several ranges gets the whole object), and a
whole-object download checked against its sha256 as it streams.

With ``MARLFORGE_DOWNLOAD_URL_TTL_S`` set, a GET of an object in an S3 store is instead a 307 to a
short-lived presigned URL (the store then serves the bytes and the ranges), its ``ETag`` still the
recorded sha256 for the client to check.

A missing object is a 404 ``file_missing``, one whose size differs from its record a 410
``file_corrupt``, a store that cannot be read a 503 ``storage_unavailable``: never a 500.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator

from fastapi import Request, Response
from fastapi.responses import FileResponse, StreamingResponse
from starlette.responses import MalformedRangeHeader, RangeNotSatisfiable

from api.errors import ApiError
from core.storage import ArtifactStore, ObjectCorrupt, ObjectMissing, StoreError
from core.storage.base import content_disposition

log = logging.getLogger(__name__)


def stat_or_error(store: ArtifactStore, key: str, what: str) -> int:
    """The object's size; the API's error when it is missing or the store cannot be read."""
    try:
        size = store.stat(key)
    except StoreError as exc:
        raise _unavailable(exc) from None
    if size is None:
        log.warning("the file of %s is missing: %s", what, store.locate(key))
        raise ApiError(
            404, "file_missing", f"the file of {what} is missing from the artifact storage"
        )
    return size


def object_response(
    request: Request,
    store: ArtifactStore,
    key: str,
    *,
    size: int,
    sha256: str,
    what: str,
    media_type: str = "application/octet-stream",
    filename: str | None = None,
    redirect_ttl_s: int = 0,
) -> Response:
    """The object under ``key`` as the answer to ``request`` (GET or HEAD); ``size`` and
    ``sha256`` are what its record promises, ``what`` names it in errors ("checkpoint X").
    ``redirect_ttl_s`` > 0: a GET the store can presign is a 307 to a URL valid that long."""
    stored = stat_or_error(store, key, what)
    if stored != size:
        log.error("%s has %d bytes, its record %d", store.locate(key), stored, size)
        raise ApiError(
            410, "file_corrupt",
            f"the file of {what} has {stored:,} bytes in the artifact storage, not the {size:,} "
            "it was recorded with; it cannot be served",
        )  # fmt: skip
    etag = f'"{sha256}"'
    headers = {"etag": etag, "accept-ranges": "bytes"}
    if filename is not None:
        headers["content-disposition"] = content_disposition(filename)
    if etag in [t.strip() for t in request.headers.get("if-none-match", "").split(",")]:
        return Response(status_code=304, headers={"etag": etag})
    span = _range(request, size, etag)
    if request.method == "HEAD":
        return Response(headers={**headers, "content-length": str(size)}, media_type=media_type)
    if redirect_ttl_s > 0:
        signed = _presigned(store, key, sha256, redirect_ttl_s, filename, what)
        if signed is not None:
            # The store answers the client, ranges included; the ETag here is the recorded
            # sha256 the client checks its bytes against (the store's own ETag is not one).
            return Response(
                status_code=307,
                headers={"location": signed, "etag": etag, "cache-control": "no-store"},
            )
    if span is None:
        body = _verified(_open(store, key, 0, None), sha256, store.locate(key))
        headers["content-length"] = str(size)
        return StreamingResponse(body, headers=headers, media_type=media_type)
    start, stop = span
    headers["content-length"] = str(stop - start)
    headers["content-range"] = f"bytes {start}-{stop - 1}/{size}"
    return StreamingResponse(
        _open(store, key, start, stop), status_code=206, headers=headers, media_type=media_type
    )


def whole_object(
    store: ArtifactStore, key: str, what: str, *, media_type: str, headers: dict[str, str]
) -> StreamingResponse:
    """The whole object, streamed, for objects no record describes (a replay GIF)."""
    size = stat_or_error(store, key, what)
    headers = {**headers, "content-length": str(size)}
    return StreamingResponse(_open(store, key, 0, None), headers=headers, media_type=media_type)


def _presigned(
    store: ArtifactStore, key: str, sha256: str, ttl_s: int, filename: str | None, what: str
) -> str | None:
    try:
        return store.presign(key, sha256=sha256, expires_s=ttl_s, filename=filename)
    except ObjectMissing:
        raise ApiError(
            404, "file_missing", f"the file of {what} is missing from the artifact storage"
        ) from None
    except ObjectCorrupt as exc:
        log.error("%s", exc)
        raise ApiError(
            410, "file_corrupt",
            f"the file of {what} in the artifact storage is not the one recorded (its sha256 "
            "differs); it cannot be served",
        ) from None  # fmt: skip
    except StoreError as exc:
        raise _unavailable(exc) from None


def _range(request: Request, size: int, etag: str) -> tuple[int, int] | None:
    """The one byte range asked for, ``[start, stop)``; None for the whole object."""
    header = request.headers.get("range")
    if header is None:
        return None
    if_range = request.headers.get("if-range")
    if if_range is not None and if_range.strip() != etag:
        return None  # the client's copy is another object: it gets the whole of this one
    # Starlette's own parser judges the header, so that a bad range becomes an error in the
    # API's JSON shape rather than Starlette's plain-text one.
    try:
        ranges = FileResponse._parse_range_header(header, size)
    except MalformedRangeHeader as exc:
        raise ApiError(400, "invalid_range", exc.content) from None
    except RangeNotSatisfiable:
        raise ApiError(
            416,
            "range_not_satisfiable",
            f"the file has {size} bytes",
            headers={"content-range": f"bytes */{size}"},
        ) from None
    return ranges[0] if len(ranges) == 1 else None


def _open(store: ArtifactStore, key: str, start: int, stop: int | None) -> Iterator[bytes]:
    try:
        return store.read(key, start, stop)
    except ObjectMissing:
        raise ApiError(
            404, "file_missing", "the file is missing from the artifact storage"
        ) from None
    except StoreError as exc:
        raise _unavailable(exc) from None


def _verified(chunks: Iterator[bytes], sha256: str, url: str) -> Iterator[bytes]:
    # Hashed as it goes: a body whose bytes are not the recorded ones is cut short before its
    # last chunk, so a client never completes a download of a corrupt file.
    digest = hashlib.sha256()
    pending: bytes | None = None
    for chunk in chunks:
        if pending is not None:
            yield pending
        digest.update(chunk)
        pending = chunk
    if digest.hexdigest() != sha256:
        log.error("%s does not match its recorded sha256; the download was cut", url)
        raise ObjectCorrupt(url, sha256, digest.hexdigest())
    if pending is not None:
        yield pending


def _unavailable(exc: StoreError) -> ApiError:
    log.warning("the artifact storage could not be read: %s", exc)
    return ApiError(
        503,
        "storage_unavailable",
        "the artifact storage cannot be reached; try again shortly",
        headers={"retry-after": "5"},
    )
