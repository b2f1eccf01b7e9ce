"""The operator console at ``/ui``: a static page (HTML, JavaScript, CSS shipped as package data
in ``static/``, no build step, nothing fetched from elsewhere) that reads ``/v1`` with the
operator's bearer token and follows ``GET /v1/events`` (ADR 0021).

The page itself holds no data, so it is served without a token (a browser cannot attach an
``Authorization`` header to a navigation); every datum it shows comes from ``/v1`` with the
token, which the page keeps in ``sessionStorage`` and sends only in that header — never in a URL
or a cookie, so no request the browser makes on its own carries it (CSRF-safe by construction).
The Host/Origin check of ``/mcp`` and ``/v1`` covers ``/ui`` too (``api/host_check.py``).

Every answer carries a Content-Security-Policy without ``unsafe-inline`` or ``unsafe-eval``:
scripts, styles and connections from this origin only, no frames, no form submissions, no
base-URI changes; plus ``nosniff``, ``no-referrer`` and ``no-store``. The files are read once,
when the routes are built, and served from memory."""

from __future__ import annotations

from importlib import resources

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

__all__ = ["CSP", "ui_routes"]

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)

_TYPES = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}

_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


def _load() -> dict[str, bytes]:
    static = resources.files(__name__).joinpath("static")
    return {name: static.joinpath(name).read_bytes() for name in _TYPES}


def ui_routes() -> list[BaseRoute]:
    """``GET /ui`` (redirects to ``/ui/``), ``GET /ui/`` (the page) and ``GET /ui/{file}`` (its
    script, style and icon); anything else under ``/ui/`` answers 404. Every answer carries the
    security headers in the module docstring."""
    files = _load()

    async def page(request: Request) -> Response:
        name = request.path_params.get("name", "index.html")
        body = files.get(name)
        if body is None:
            return JSONResponse(
                {"error": {"code": "not_found", "message": "no such console file"}}, status_code=404, headers=_HEADERS
            )
        return Response(body, media_type=_TYPES[name], headers=_HEADERS)

    async def redirect(request: Request) -> Response:
        return RedirectResponse("/ui/", status_code=308, headers=_HEADERS)

    return [
        Route("/ui", endpoint=redirect, methods=["GET"]),
        Route("/ui/", endpoint=page, methods=["GET"]),
        Route("/ui/{name}", endpoint=page, methods=["GET"]),
    ]
