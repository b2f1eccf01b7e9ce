"""An MCP server protected by the gateway's own resource-server parts, on 127.0.0.1.

``protected_mcp_server(az)`` serves a ``DynamicServer`` over streamable HTTP at ``/mcp`` behind
``BearerGuard`` + ``ResourceServer`` trusting the fixture authorization server ``az`` (resource =
this server's ``/mcp`` URL), with the RFC 9728 metadata routes. It records every
``Authorization`` header that reached it (``authorizations``, before the guard: what a client
or a gateway actually sent) and every identity the guard admitted (``identities``).

Used as a spec-only MCP client's target (the official SDK's OAuth flow) and as an OAuth
protected *upstream* of the gateway (client credentials; no token passthrough)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from mcp.server.sse import SseServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.applications import Starlette
from starlette.routing import Mount, Route
from starlette.types import Receive, Scope, Send

from mcp_reconciler.api.oauth import IDENTITY_KEY, AuthFailure, BearerGuard, Identity, ResourceServer, metadata_routes
from mcp_reconciler.api.oauth.guard import send_failure
from mcp_reconciler.reconciler.oauth_config import OAuthConfig
from tests.support.asgi_server import listening_socket, serve_app
from tests.support.authz_server import AuthorizationServer
from tests.support.servers import DynamicServer


@dataclass
class Protected:
    url: str
    config: OAuthConfig
    server: DynamicServer
    resource_server: ResourceServer
    authorizations: list[str | None] = field(default_factory=list)
    identities: list[Identity] = field(default_factory=list)
    revoked: set[str] = field(default_factory=set)  # tokens answered 401 before the guard (early revocation)
    revoke_all: bool = False  # every token answered 401


@contextlib.asynccontextmanager
async def protected_mcp_server(
    az: AuthorizationServer,
    *,
    tools: Sequence[str] = ("echo",),
    required_scopes: Sequence[str] = ("mcp",),
    transport: Literal["http", "sse"] = "http",
) -> AsyncIterator[Protected]:
    """Streamable HTTP at ``/mcp``, or with ``transport="sse"`` the legacy HTTP+SSE transport
    (``GET /sse`` + ``POST /messages/``, both guarded; ``url`` is then the ``/sse`` URL)."""
    sock = listening_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/{'mcp' if transport == 'http' else 'sse'}"
    config = OAuthConfig.model_validate(
        {"resource": url, "issuers": [{"issuer": az.issuer}], "roles": {"required_scopes": list(required_scopes)}}
    )
    dynamic = DynamicServer("protected", list(tools))
    manager = StreamableHTTPSessionManager(app=dynamic.server, stateless=False)
    async with ResourceServer(config) as rs:
        state = Protected(url, config, dynamic, rs)

        def protect(inner: Any) -> _Asgi:
            async def admitted(scope: Scope, receive: Receive, send: Send) -> None:
                state.identities.append(scope[IDENTITY_KEY])
                await inner(scope, receive, send)

            guard = BearerGuard(admitted, rs, "mcp")

            async def recorder(scope: Scope, receive: Receive, send: Send) -> None:
                headers: dict[bytes, bytes] = dict(scope["headers"])
                raw = headers.get(b"authorization")
                authorization = raw.decode("latin-1") if raw is not None else None
                state.authorizations.append(authorization)
                revoked = authorization is not None and authorization.removeprefix("Bearer ") in state.revoked
                if authorization is not None and (state.revoke_all or revoked):
                    await send_failure(send, AuthFailure("inactive"), rs.challenge(AuthFailure("inactive")))
                    return
                await guard(scope, receive, send)

            # An object, not a function: Starlette calls a function endpoint with a Request.
            return _Asgi(recorder)

        routes: list[Any]
        if transport == "http":
            routes = [Route("/mcp", endpoint=protect(manager.handle_request))]
        else:
            sse = SseServerTransport("/messages/")

            async def sse_stream(scope: Scope, receive: Receive, send: Send) -> None:
                async with sse.connect_sse(scope, receive, send) as (read, write):
                    await dynamic.server.run(read, write, dynamic.server.create_initialization_options())

            routes = [
                Route("/sse", endpoint=protect(sse_stream), methods=["GET"]),
                Mount("/messages/", app=protect(sse.handle_post_message)),
            ]
        app: Any = Starlette(routes=[*routes, *metadata_routes(config)])
        async with manager.run(), serve_app(app, sock):
            yield state


class _Asgi:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)
