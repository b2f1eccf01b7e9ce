"""The HTTP surface: ``/mcp`` and ``/mcp/<view>`` on the gateway's own data plane
(``api/plane``: both protocol eras, named views of ``api/mcp_views.py``), and ``/healthz``,
``/readyz``, ``/v1``, ``/ui``, ``/metrics`` and the OAuth routes on Starlette.

``/mcp`` passes the plane's edge pipeline (``api/plane/pipeline.py``: drain I14, Host/Origin,
body limit I18, credentials I16/OAuth — one explicit order) and nothing of Starlette; every other
path passes the same Host/Origin check (DNS-rebinding protection for ``/v1`` and the console at
``/ui``), and with an ``oauth:`` section (``api/oauth/edge.py``) access tokens are accepted on
``/v1`` beside the static tokens and the RFC 9728 metadata is served at
``/.well-known/oauth-protected-resource[/mcp]``.

``/readyz`` means "can serve": 200 while a generation is published, naming degraded conditions
(an invalid config edit while the last good config serves, a deferred publication) in
``conditions``; 503 only when nothing can be served (before the first publication, shutting
down).

Direction of the wiring: this module depends on the front door, never the reverse. The plane
hands the front door only what its notifier asks — "is this session's GET stream open?" — as a
``PushGate``; readiness comes from the front door's catalog access."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_reconciler.api.frontdoor import FrontDoor
from mcp_reconciler.api.host_check import LOOPBACK_HOSTS, LOOPBACK_ORIGINS, HostOriginCheck
from mcp_reconciler.api.mcp_auth import CredentialSource, SessionTokens
from mcp_reconciler.api.oauth.edge import OAuthEdge
from mcp_reconciler.api.oauth.identity import GrantSet
from mcp_reconciler.api.plane.asgi import Plane, build_plane
from mcp_reconciler.api.plane.pipeline import EdgePolicy, Pipeline
from mcp_reconciler.api.plane.sessions import SessionTable

__all__ = ["LOOPBACK_HOSTS", "LOOPBACK_ORIGINS", "HttpSurface", "build_app"]


@dataclass(frozen=True)
class HttpSurface:
    """What :func:`build_app` built: the listener's ASGI ``app``, the data ``plane`` behind
    ``/mcp`` (run :meth:`Plane.run` beside ``front.run``) and ``/mcp``'s edge ``pipeline``."""

    app: ASGIApp
    plane: Plane
    pipeline: Pipeline

    @property
    def transport_sessions(self) -> SessionTable:
        """The open 2025-era sessions (counts for status, the limit gauges, stop and tests)."""
        return self.plane.era2025.table


class _McpSplit:
    """``/mcp`` and ``/mcp/<view>`` to the plane's pipeline, everything else to ``rest``."""

    def __init__(self, mcp: ASGIApp, rest: ASGIApp) -> None:
        self._mcp, self._rest = mcp, rest

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path == "/mcp" or path.startswith("/mcp/"):
            await self._mcp(scope, receive, send)
        else:
            await self._rest(scope, receive, send)


def build_app(
    front: FrontDoor,
    *,
    allowed_hosts: Sequence[str] = (),
    allowed_origins: Sequence[str] = (),
    session_idle_timeout_s: float = 300.0,
    max_sessions: int = 4096,
    max_sessions_per_client: int = 256,
    max_body_bytes: int = 4 * 1024 * 1024,
    extra_routes: Sequence[BaseRoute] = (),
    credentials: Sequence[CredentialSource] | None = None,
    anonymous: Callable[[], GrantSet | None] = lambda: None,
    oauth: OAuthEdge | None = None,
) -> HttpSurface:
    """The ASGI app serving ``front`` at ``/mcp`` plus the health routes and ``extra_routes``;
    ``front.run`` (the notifier) and the returned plane's ``run`` are the caller's to run.
    2025-era sessions are bounded in total and per client, and closed after
    ``session_idle_timeout_s`` without a request or an open stream (``gateway.limits``).
    ``credentials`` accepted on ``/mcp`` default to the front door's session tokens;
    ``anonymous()`` is the grant spec of callers without a credential (``None``: refused);
    ``oauth`` adds access tokens after them, guards ``/v1`` for access tokens and serves the
    protected resource metadata."""
    sources = list(credentials if credentials is not None else [SessionTokens(front.authority)])
    if oauth is not None:
        sources.append(oauth.credentials)  # after the session tokens: those never reach an issuer
    pipe, plane = build_plane(
        front,
        EdgePolicy(
            credentials=sources,
            anonymous=anonymous,
            allowed_hosts=allowed_hosts,
            allowed_origins=allowed_origins,
            max_body_bytes=max_body_bytes,
            resource_metadata_url=oauth.resource_metadata_url if oauth is not None else None,
            oauth_scope=oauth.scope if oauth is not None else (),
        ),
        max_sessions=max_sessions,
        max_sessions_per_client=max_sessions_per_client,
        session_idle_s=session_idle_timeout_s,
    )

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> JSONResponse:
        readiness = front.catalog.readiness()
        body: dict[str, Any] = {"ready": readiness.ready, "revision": readiness.revision}
        if readiness.reason is not None:
            body["reason"] = readiness.reason
        if readiness.conditions:
            body["conditions"] = list(readiness.conditions)
        return JSONResponse(body, status_code=200 if readiness.ready else 503)

    routes: list[BaseRoute] = [
        Route("/healthz", endpoint=healthz, methods=["GET"]),
        Route("/readyz", endpoint=readyz, methods=["GET"]),
        *(oauth.routes if oauth is not None else ()),
        *extra_routes,
    ]
    rest: ASGIApp = Starlette(routes=routes)
    if oauth is not None:
        rest = oauth.control(rest)  # inside the Host/Origin check: a foreign Host never reaches an issuer
    checked = HostOriginCheck(
        rest,
        allowed_hosts=[*LOOPBACK_HOSTS, *allowed_hosts],
        allowed_origins=[*LOOPBACK_ORIGINS, *allowed_origins],
    )
    return HttpSurface(_McpSplit(pipe.app, checked), plane, pipe)
