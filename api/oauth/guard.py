"""An ASGI guard that admits only requests the resource server accepts.

``BearerGuard(app, rs, "mcp")`` in front of an endpoint answers 401/403 (with the
``WWW-Authenticate`` challenge) or 503 itself, and otherwise calls ``app`` with the caller's
:class:`Identity` in ``scope[IDENTITY_KEY]`` — where the ``/v1`` handlers and the front door read
it. The body is the RFC 6749 error object; nothing from the token is in it.

Session binding for free: the guard also sets ``scope["user"]`` to the MCP SDK's
``AuthenticatedUser`` for the identity (:func:`sdk_user`). The SDK's streamable-HTTP session
manager (and the gateway's subclass of it) remembers the ``(client_id, issuer, subject)`` of the
user that opened a stateful (2025-11-25) session and answers 404 to any request on that session
from another one. We put the *principal* there — its namespace, and its whole id (issuer,
subject and the token's client id, ADR 0011) as the subject — so a refreshed token of the same
subject and client keeps its session while another subject, another client application of the
same user, or a static owner of the same name, is refused."""

from __future__ import annotations

import functools
import json

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.authentication import AuthCredentials
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_reconciler.api.oauth.challenge import AuthFailure, authorization_header
from mcp_reconciler.api.oauth.identity import Identity
from mcp_reconciler.api.oauth.resource_server import Need, ResourceServer

__all__ = ["IDENTITY_KEY", "BearerGuard", "sdk_user", "send_failure"]

IDENTITY_KEY = "mcp_reconciler.identity"


@functools.lru_cache(maxsize=4096)
def sdk_user(identity: Identity) -> AuthenticatedUser:
    """The MCP SDK's view of ``identity``, keyed by its principal (see the module doc). The
    ``token`` field stays empty: the credential itself is never kept."""
    principal = identity.principal
    expires = int(identity.expires_at) if identity.expires_at is not None else None
    return AuthenticatedUser(
        AccessToken(
            token="",
            client_id=principal.namespace,
            scopes=sorted(identity.scopes),
            expires_at=expires,
            subject=str(principal),  # the whole principal id: issuer, subject and client (ADR 0011)
            claims={"iss": principal.issuer},
        )
    )


async def send_failure(send: Send, failure: AuthFailure, headers: dict[str, str]) -> None:
    """Answer ``failure`` as a JSON error response with ``headers``."""
    body = json.dumps(failure.body()).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": failure.status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


class BearerGuard:
    """ASGI middleware: authenticate and authorize every HTTP request for ``need``."""

    def __init__(self, app: ASGIApp, server: ResourceServer, need: Need, *, bind_sdk_sessions: bool = True) -> None:
        self.app = app
        self.server = server
        self.need = need
        self.bind_sdk_sessions = bind_sdk_sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass an HTTP request on with its :class:`Identity` in the scope (and the SDK's user when
        ``bind_sdk_sessions``), or answer the auth failure with its challenge headers; the app never
        sees an unauthorized request. Non-HTTP scopes pass as is."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        authorization = authorization_header(scope)
        try:
            identity = await self.server.require(authorization, self.need)
        except AuthFailure as failure:
            await send_failure(send, failure, self.server.challenge(failure))
            return
        scope[IDENTITY_KEY] = identity
        if self.bind_sdk_sessions:
            user = sdk_user(identity)
            scope["user"] = user
            scope["auth"] = AuthCredentials(user.scopes)
        await self.app(scope, receive, send)
