"""``/docs`` (Swagger UI) and ``/redoc`` without a CDN: their assets served by this server (offline clusters).

The assets come from the ``fastapi-offline`` package (Swagger UI 5, which renders OpenAPI 3.1) when it is installed;
otherwise ``/docs`` falls back to FastAPI's CDN page and says so in the log.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

log = logging.getLogger("rebalancer.api")

STATIC_URL = "/docs-assets"


def assets_dir() -> Path | None:
    try:
        import fastapi_offline
    except ImportError:
        return None
    d = Path(fastapi_offline.__file__).parent / "static"
    return d if (d / "swagger-ui-bundle.js").is_file() else None


def install(app: FastAPI) -> None:
    local = assets_dir()
    if local is not None:
        app.mount(STATIC_URL, StaticFiles(directory=local), name="docs-assets")
    else:
        log.warning("Swagger UI assets not installed (pip install fastapi-offline): /docs loads them from a CDN")

    @app.get("/docs", include_in_schema=False)
    async def swagger() -> HTMLResponse:
        kw: dict[str, Any] = {}
        if local is not None:
            kw = {"swagger_js_url": f"{STATIC_URL}/swagger-ui-bundle.js",
                  "swagger_css_url": f"{STATIC_URL}/swagger-ui.css",
                  "swagger_favicon_url": f"{STATIC_URL}/favicon.png"}
        return get_swagger_ui_html(openapi_url="/openapi.json", title="Rebalancer API",
                                   oauth2_redirect_url="/docs/oauth2-redirect",
                                   swagger_ui_parameters={"persistAuthorization": True}, **kw)

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        kw: dict[str, Any] = {}
        if local is not None and (local / "redoc.standalone.js").is_file():
            kw = {"redoc_js_url": f"{STATIC_URL}/redoc.standalone.js", "redoc_favicon_url": f"{STATIC_URL}/favicon.png",
                  "with_google_fonts": False}
        return get_redoc_html(openapi_url="/openapi.json", title="Rebalancer API", **kw)

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    async def redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()
