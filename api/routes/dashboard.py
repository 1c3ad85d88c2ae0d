"""The browser dashboard: ``/`` serves its page, ``/static/...`` its scripts and styles.

Everything it needs ships in ``api/static`` (no CDN, no build step): plain ES modules and an SVG
chart of our own, so the dashboard works offline and is served by the API like any other route.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

from api.errors import ApiError

router = APIRouter(include_in_schema=False)

STATIC_DIR = Path(__file__).resolve().parents[1] / "static"
_MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
# The page itself is revalidated on every load so that a new version reaches open browsers; its
# assets are small and revalidated too (ETag), which keeps a deployment's update visible at once.
_HEADERS = {"cache-control": "no-cache"}


@router.get("/")
def index() -> FileResponse:
    return FileResponse(
        STATIC_DIR / "index.html", media_type=_MEDIA_TYPES[".html"], headers=_HEADERS
    )


@router.get("/static/{path:path}")
def static_file(path: str) -> FileResponse:
    if "\x00" in path:  # no file name holds NUL, and the file system calls refuse it
        raise ApiError(404, "not_found", "no such static file")
    target = (STATIC_DIR / path).resolve()
    if not target.is_relative_to(STATIC_DIR) or not target.is_file():
        raise ApiError(404, "not_found", f"no static file {path!r}")
    media_type = _MEDIA_TYPES.get(target.suffix, "application/octet-stream")
    return FileResponse(target, media_type=media_type, headers=_HEADERS)
