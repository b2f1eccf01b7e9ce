"""The HTTP surface: ``/mcp`` (streamable HTTP, both protocol eras), ``/mcp/<view>`` (a named
view of the catalog, ``api/mcp_views.py``), ``/healthz``, ``/readyz``.

DNS-rebinding protection is on for ``/mcp``, ``/v1`` and the console at ``/ui`` alike
(``api/host_check.py``): only loopback Host/Origin values are accepted unless the operator lists
more. ``/mcp`` needs a valid credential unless the config opens anonymous access
(``api/mcp_auth.py``, I16); both checks run before the SDK sees the request. With an ``oauth:``
section (``api/oauth/edge.py``) access tokens are accepted on ``/mcp`` beside the session tokens
and on ``/v1`` beside the static tokens, and the RFC 9728 metadata is served at
``/.well-known/oauth-protected-resource[/mcp]``.
``json_response`` stays off, or progress and new-era cancellation would be lost (SDK behaviour).

``/readyz`` means "can serve": 200 while a generation is published, naming degraded conditions
(an invalid config edit while the last good config serves, a deferred publication) in
``conditions``; 503 only when nothing can be served (before the first publication, shutting
down).

Direction of the wiring: this module depends on the front door, never the reverse. It builds
the SDK's session manager (``sdk_compat.GatewaySessionManager``: one bounded event store per
session) from the front door's ``server`` and hands the front door only what its notifier
asks — "is this session's GET stream open?" — as a ``PushGate``; readiness comes from the front
door's catalog access."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from mcp_reconciler.api.event_store import BoundedEventStore
from mcp_reconciler.api.frontdoor import FrontDoor
from mcp_reconciler.api.host_check import LOOPBACK_HOSTS, LOOPBACK_ORIGINS, HostOriginCheck
from mcp_reconciler.api.mcp_auth import CredentialSource, McpGuard, SessionTokens
from mcp_reconciler.api.mcp_views import ViewGate
from mcp_reconciler.api.oauth.edge import OAuthEdge
from mcp_reconciler.api.oauth.identity import GrantSet
from mcp_reconciler.api.sdk_compat import GatewaySessionManager

__all__ = ["LOOPBACK_HOSTS", "LOOPBACK_ORIGINS", "build_app"]


def build_app(
    front: FrontDoor,
    *,
    allowed_hosts: Sequence[str] = (),
    allowed_origins: Sequence[str] = (),
    session_idle_timeout_s: float = 300.0,
    max_sessions: int | None = 4096,
    max_sessions_per_client: int | None = 256,
    max_body_bytes: int = 4 * 1024 * 1024,
    extra_routes: Sequence[BaseRoute] = (),
    credentials: Sequence[CredentialSource] | None = None,
    anonymous: Callable[[], GrantSet | None] = lambda: None,
    oauth: OAuthEdge | None = None,
) -> tuple[ASGIApp, GatewaySessionManager]:
    """The ASGI app serving ``front`` at ``/mcp`` plus the health routes and ``extra_routes``.
    Its lifespan runs the session manager; ``front.run`` (the notifier) is the caller's to run; the
    session manager is returned beside the app.
    Transport sessions (2025-11-25 era) are bounded in total and per client, and closed after
    ``session_idle_timeout_s`` without a request or an open stream (``gateway.limits``).
    ``credentials`` accepted on ``/mcp`` default to the front door's session tokens;
    ``anonymous()`` is the grant spec of callers without a credential (``None``: refused);
    ``oauth`` adds access tokens after them, guards ``/v1`` for access tokens and serves the
    protected resource metadata."""
    manager = GatewaySessionManager(
        front.server,
        event_store_factory=BoundedEventStore,
        json_response=False,
        stateless=False,
        session_idle_timeout=session_idle_timeout_s,
        max_sessions=max_sessions,
        max_sessions_per_client=max_sessions_per_client,
        max_request_body_size=max_body_bytes,
        security_settings=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=[*LOOPBACK_HOSTS, *allowed_hosts],
            allowed_origins=[*LOOPBACK_ORIGINS, *allowed_origins],
        ),
    )
    front.gate_pushes(manager)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

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

    sources = list(credentials if credentials is not None else [SessionTokens(front.authority)])
    if oauth is not None:
        sources.append(oauth.credentials)  # after the session tokens: those never reach an issuer

    def guarded(app: ASGIApp) -> McpGuard:
        return McpGuard(
            app,
            credentials=sources,
            anonymous=anonymous,
            resource_metadata_url=oauth.resource_metadata_url if oauth is not None else None,
            scope=oauth.scope if oauth is not None else (),
        )

    def has_view(name: str) -> bool:
        live = front.catalog.current()
        return live is not None and name in live.generation.catalog.views

    mcp = StreamableHTTPASGIApp(manager)
    routes: list[BaseRoute] = [
        Route("/mcp", endpoint=guarded(mcp)),
        # Named views (api/mcp_views.py): the same endpoint and session manager, the view in the scope.
        Route("/mcp/{view}", endpoint=guarded(ViewGate(mcp, authority=front.authority, has_view=has_view))),
        Route("/healthz", endpoint=healthz, methods=["GET"]),
        Route("/readyz", endpoint=readyz, methods=["GET"]),
        *(oauth.routes if oauth is not None else ()),
        *extra_routes,
    ]
    app: ASGIApp = Starlette(routes=routes, lifespan=lifespan)
    if oauth is not None:
        app = oauth.control(app)  # inside the Host/Origin check: a foreign Host never reaches an issuer
    checked = HostOriginCheck(
        app,
        allowed_hosts=[*LOOPBACK_HOSTS, *allowed_hosts],
        allowed_origins=[*LOOPBACK_ORIGINS, *allowed_origins],
    )
    return checked, manager  # the manager: transport-session counts for status, stop and tests
