"""The HTTP surface: ``/mcp`` and ``/mcp/<view>`` on the gateway's own data plane
(``api/plane``: both protocol eras, named views of ``api/mcp_views.py``), and ``/healthz``,
``/readyz``, ``/v1``, ``/ui``, ``/metrics`` and the OAuth routes on Starlette.

The listener's app is the plane (``api/plane/asgi.py``): it routes ``/mcp`` by path first, through
its edge pipeline (``api/plane/pipeline.py``: drain I14, Host/Origin, body limit I18, credentials
I16/OAuth — steps called in one explicit order) and nothing of Starlette; every other path goes
to this module's edge (the same drain, the control API's body limit, the same Host/Origin check:
DNS-rebinding protection for ``/v1`` and the console at ``/ui``), then Starlette. With an
``oauth:`` section (``api/oauth/edge.py``) access tokens are accepted on ``/v1`` beside the static
tokens and the RFC 9728 metadata is served at ``/.well-known/oauth-protected-resource[/mcp]``.

``/readyz`` means "can serve": 200 while a generation is published, naming degraded conditions
(an invalid config edit while the last good config serves, a deferred publication) in
``conditions``; 503 only when nothing can be served (before the first publication, shutting
down).

Direction of the wiring: this module depends on the front door, never the reverse. The plane
hands the front door only what its notifier asks — "is this session's GET stream open?" — as a
``PushGate``; readiness comes from the front door's catalog access."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_reconciler.api.frontdoor import FrontDoor
from mcp_reconciler.api.host_check import LOOPBACK_HOSTS, LOOPBACK_ORIGINS, HostOriginCheck
from mcp_reconciler.api.http_limits import BodyLimit, Refusal
from mcp_reconciler.api.lifecycle import Drain
from mcp_reconciler.api.mcp_auth import CredentialSource, SessionTokens
from mcp_reconciler.api.oauth.edge import OAuthEdge
from mcp_reconciler.api.oauth.identity import GrantSet
from mcp_reconciler.api.plane.asgi import Plane, build_plane
from mcp_reconciler.api.plane.pipeline import EdgePolicy
from mcp_reconciler.api.plane.sessions import SessionTable

__all__ = ["LOOPBACK_HOSTS", "LOOPBACK_ORIGINS", "HttpSurface", "build_app"]


@dataclass(frozen=True)
class HttpSurface:
    """What :func:`build_app` built: the listener's ASGI ``app`` (the data ``plane``, which routes
    ``/mcp`` itself and hands other paths to the Starlette side; run :meth:`Plane.run` beside
    ``front.run``), the listener's ``drain`` switch (both edges ask it) and its body limits
    (``/mcp``'s, then the other paths'; their ``refused`` counts are ``gateway.limits.hits``)."""

    app: ASGIApp
    plane: Plane
    drain: Drain
    bodies: tuple[BodyLimit, ...]

    @property
    def transport_sessions(self) -> SessionTable:
        """The open 2025-era sessions (counts for status, the limit gauges, stop and tests)."""
        return self.plane.era2025.table


class _RestEdge:
    """The edge of every path but ``/mcp``, in order: drain (I14), the body limit of the paths it
    covers (I18: ``/v1``), Host/Origin (``/v1`` and ``/ui``); the same steps as ``/mcp``'s
    pipeline, run here in front of Starlette."""

    def __init__(self, app: ASGIApp, drain: Drain, body: BodyLimit, host: HostOriginCheck) -> None:
        self._app, self._drain, self._body, self._host = app, drain, body, host

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = self._drain.check(scope)
            if refusal is None and self._body.limit_for(str(scope.get("path", ""))) is not None:
                body = await self._body.read(scope, receive)
                if body is None:
                    return  # the client left before its body was read: nothing to answer
                if isinstance(body, Refusal):
                    refusal = body
                else:
                    receive = _replay(body, receive)
            if refusal is None:
                refusal = self._host.check(scope)
            if refusal is not None:
                await refusal.send(send)
                return
        await self._app(scope, receive, send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` with ``body`` (already read) as its first message."""
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        return pending.pop() if pending else await receive()

    return replayed


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
    rest_body_limits: Mapping[str, int] | None = None,
) -> HttpSurface:
    """The ASGI app serving ``front`` at ``/mcp`` plus the health routes and ``extra_routes``;
    ``front.run`` (the notifier) and the returned plane's ``run`` are the caller's to run.
    2025-era sessions are bounded in total and per client, and closed after
    ``session_idle_timeout_s`` without a request or an open stream (``gateway.limits``).
    ``credentials`` accepted on ``/mcp`` default to the front door's session tokens;
    ``anonymous()`` is the grant spec of callers without a credential (``None``: refused);
    ``oauth`` adds access tokens after them, guards ``/v1`` for access tokens and serves the
    protected resource metadata. ``rest_body_limits`` bounds the bodies of other paths by prefix
    (``/v1``: the control API's)."""
    sources = list(credentials if credentials is not None else [SessionTokens(front.authority)])
    if oauth is not None:
        sources.append(oauth.credentials)  # after the session tokens: those never reach an issuer
    drain = Drain()
    plane = build_plane(
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
        drain=drain,
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
        rest = oauth.control(rest)  # behind the Host/Origin check: a foreign Host never reaches an issuer
    host = HostOriginCheck(
        allowed_hosts=[*LOOPBACK_HOSTS, *allowed_hosts],
        allowed_origins=[*LOOPBACK_ORIGINS, *allowed_origins],
        prefixes=("/v1", "/ui"),
    )
    rest_body = BodyLimit(rest_body_limits or {})
    plane.rest = _RestEdge(rest, drain, rest_body, host)
    return HttpSurface(plane, plane, drain, (plane.pipeline.body, rest_body))
