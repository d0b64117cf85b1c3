"""``/docs``: Swagger UI from local assets only, and only when asked for (``serve --docs DIR``).

FastAPI's default page loads Swagger UI from a CDN (unpinned, no integrity, broken on air-gapped
clusters) on the same origin where the status page keeps the token in ``sessionStorage``. The
Swagger UI distribution is not a dependency of attnplan, so ``/docs`` is off by default; given a
directory holding ``swagger-ui-bundle.js`` and ``swagger-ui.css`` (the ``swagger-ui-dist`` npm
package's files) it is served from there, under a CSP that allows nothing but this origin.
``/openapi.json`` is always served.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import Response

from attnplan.policy import InvalidInputError
from attnplan.safeio import read_bounded

ASSETS = {"swagger-ui-bundle.js": "text/javascript; charset=utf-8", "swagger-ui.css": "text/css; charset=utf-8"}
MAX_ASSET_BYTES = 8 << 20
CSP = ("default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
       "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def load_assets(directory: Path) -> dict[str, bytes]:
    """The Swagger UI files in ``directory``; ``InvalidInputError`` naming what is missing."""
    d = Path(directory)
    if not d.is_dir():
        raise InvalidInputError("docs", f"{d}: not a directory (give the swagger-ui-dist files' directory)")
    out = {}
    for name in ASSETS:
        out[name] = read_bounded(d / name, what="docs", max_bytes=MAX_ASSET_BYTES).encode("utf-8")
    return out


def docs_routes(directory: Path, *, title: str = "attnplan") -> APIRouter:
    assets = load_assets(directory)
    headers = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}
    page = get_swagger_ui_html(openapi_url="/openapi.json", title=f"{title} - API",
                               swagger_js_url="/docs/assets/swagger-ui-bundle.js",
                               swagger_css_url="/docs/assets/swagger-ui.css",
                               swagger_favicon_url="data:,").body
    r = APIRouter(include_in_schema=False)

    @r.get("/docs")
    async def docs() -> Response:
        return Response(page, media_type="text/html; charset=utf-8", headers=headers)

    @r.get("/docs/assets/{name}")
    async def asset(name: str) -> Response:
        if name not in assets:
            raise HTTPException(404, detail="Not Found")
        return Response(assets[name], media_type=ASSETS[name], headers=headers)

    return r
