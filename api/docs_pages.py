"""The interactive API docs: Swagger UI at ``/docs`` and ReDoc at ``/redoc``, over the app's own
``/openapi.json``. Off unless ``MARLFORGE_API_DOCS`` is set (``marlforge up`` sets it for the
laptop stack; a deployment turns them on by choice). Each page loads one pinned release from
jsDelivr with Subresource Integrity, so a changed file on the CDN is refused by the browser, and
is started by a script of this origin: no inline script runs (``api.security`` gives these paths
their own Content-Security-Policy, which admits the CDN for scripts and nothing inline)."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, Response

from core.settings import Settings

CDN = "https://cdn.jsdelivr.net/npm"
SWAGGER_UI = "swagger-ui-dist@5.17.14"
REDOC = "redoc@2.1.5"
# sha384 of each file as npm publishes it (jsDelivr serves the package's files unchanged):
# ``openssl dgst -sha384 -binary FILE | openssl base64 -A`` on the files of ``npm pack``.
INTEGRITY = {
    f"{CDN}/{SWAGGER_UI}/swagger-ui-bundle.js": (
        "sha384-wmyclcVGX/WhUkdkATwhaK1X1JtiNrr2EoYJ+diV3vj4v6OC5yCeSu+yW13SYJep"
    ),
    f"{CDN}/{SWAGGER_UI}/swagger-ui.css": (
        "sha384-wxLW6kwyHktdDGr6Pv1zgm/VGJh99lfUbzSn6HNHBENZlCN7W602k9VkGdxuFvPn"
    ),
    f"{CDN}/{REDOC}/bundles/redoc.standalone.js": (
        "sha384-0GrsyTQc9Oqd8h+b2dbc4XdR2T/DYpy0tLNNstyx+LBMUyiBbcWPbEs9aRmUcaxD"
    ),
}
PATHS = frozenset({"/docs", "/redoc"})
"""The pages (``api.security`` gives them the CDN's policy)."""


def _script(url: str) -> str:
    return f'<script src="{url}" integrity="{INTEGRITY[url]}" crossorigin="anonymous"></script>'


def _page(title: str, head: str, body: str) -> str:
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>MARLForge API: {title}</title>{head}</head><body>{body}</body></html>\n"
    )


SWAGGER_PAGE = _page(
    "Swagger UI",
    f'<link rel="stylesheet" href="{CDN}/{SWAGGER_UI}/swagger-ui.css" '
    f'integrity="{INTEGRITY[f"{CDN}/{SWAGGER_UI}/swagger-ui.css"]}" crossorigin="anonymous">',
    '<div id="swagger-ui"></div>'
    + _script(f"{CDN}/{SWAGGER_UI}/swagger-ui-bundle.js")
    + '<script src="/docs/start.js"></script>',
)
SWAGGER_START = (
    "SwaggerUIBundle({url: '/openapi.json', dom_id: '#swagger-ui', deepLinking: true, "
    "presets: [SwaggerUIBundle.presets.apis], layout: 'BaseLayout'});\n"
)
REDOC_PAGE = _page(
    "ReDoc",
    "",
    '<redoc spec-url="/openapi.json"></redoc>'
    + _script(f"{CDN}/{REDOC}/bundles/redoc.standalone.js"),
)


def install_docs(app: FastAPI, settings: Settings) -> None:
    """Serve the docs pages when ``settings.api_docs``; otherwise they are 404s."""
    if not settings.api_docs:
        return

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return HTMLResponse(SWAGGER_PAGE)

    @app.get("/docs/start.js", include_in_schema=False)
    def swagger_ui_start() -> Response:
        return Response(SWAGGER_START, media_type="text/javascript")

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return HTMLResponse(REDOC_PAGE)
