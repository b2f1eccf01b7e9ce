"""The HTTP surface: ``/mcp`` (streamable HTTP, both protocol eras), ``/healthz``, ``/readyz``.

DNS-rebinding protection is on: only loopback Host/Origin values are accepted unless the
operator lists more. ``json_response`` stays off, or progress and new-era cancellation would be
lost (SDK behaviour).

Direction of the wiring: this module depends on the front door, never the reverse. It builds
the SDK's session manager (``sdk_compat.GatewaySessionManager``: one bounded event store per
session) from the front door's ``server`` and hands the front door only what its notifier
asks — "is this session's GET stream open?" — as a ``PushGate``; readiness comes from the front
door's catalog access."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from mcp_reconciler.api.event_store import BoundedEventStore
from mcp_reconciler.api.frontdoor import FrontDoor
from mcp_reconciler.api.sdk_compat import GatewaySessionManager

LOOPBACK_HOSTS = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
LOOPBACK_ORIGINS = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]


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
) -> Starlette:
    """The ASGI app serving ``front`` at ``/mcp`` plus the health routes and ``extra_routes``.
    Its lifespan runs the session manager; ``front.run`` (the notifier) is the caller's to run.
    Transport sessions (2025-11-25 era) are bounded in total and per client, and closed after
    ``session_idle_timeout_s`` without a request or an open stream (``gateway.limits``)."""
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
        ready, reason = front.catalog.readiness()
        body: dict[str, Any] = {"ready": ready, "revision": front.catalog.current_revision}
        if reason is not None:
            body["reason"] = reason
        return JSONResponse(body, status_code=200 if ready else 503)

    routes: list[BaseRoute] = [
        Route("/mcp", endpoint=StreamableHTTPASGIApp(manager)),
        Route("/healthz", endpoint=healthz, methods=["GET"]),
        Route("/readyz", endpoint=readyz, methods=["GET"]),
        *extra_routes,
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.session_manager = manager  # for status and tests: transport-session counts
    return app
