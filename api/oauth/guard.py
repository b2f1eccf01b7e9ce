"""An ASGI guard that admits only requests the resource server accepts.

``BearerGuard(app, rs, "mcp")`` in front of an endpoint answers 401/403 (with the
``WWW-Authenticate`` challenge) or 503 itself, and otherwise calls ``app`` with the caller's
:class:`Identity` in ``scope[IDENTITY_KEY]`` — where the MCP session binding and the ``/v1``
handlers read it. The body is the RFC 6749 error object; nothing from the token is in it."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_reconciler.api.oauth.challenge import AuthFailure
from mcp_reconciler.api.oauth.resource_server import Need, ResourceServer

__all__ = ["IDENTITY_KEY", "BearerGuard", "send_failure"]

IDENTITY_KEY = "mcp_reconciler.identity"


async def send_failure(send: Send, failure: AuthFailure, headers: dict[str, str]) -> None:
    """Answer ``failure`` as a JSON error response with ``headers``."""
    body = json.dumps(failure.body()).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": failure.status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


class BearerGuard:
    """ASGI middleware: authenticate and authorize every HTTP request for ``need``."""

    def __init__(self, app: ASGIApp, server: ResourceServer, need: Need) -> None:
        self.app = app
        self.server = server
        self.need = need

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        authorization: str | None = None
        for key, value in scope["headers"]:
            if key == b"authorization":
                authorization = value.decode("latin-1")
                break
        try:
            identity = await self.server.require(authorization, self.need)
        except AuthFailure as failure:
            await send_failure(send, failure, self.server.challenge(failure))
            return
        scope[IDENTITY_KEY] = identity
        await self.app(scope, receive, send)
