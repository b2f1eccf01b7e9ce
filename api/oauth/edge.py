"""The resource server wired into the gateway's HTTP edge: access tokens on ``/mcp`` and ``/v1``
beside the credentials that were there before (ADR 0011 "Wiring", ADR 0013).

:class:`OAuthEdge` is built by ``serve_http`` when the config has an ``oauth:`` section and hands
``build_app`` three things:

* :class:`AccessTokens`, a :class:`~mcp_reconciler.api.mcp_auth.CredentialSource` for ``/mcp``,
  asked *after* the session tokens (a session token is a dictionary lookup; it never reaches an
  authorization server). A token of the kind the resource server validates (a JWT; anything
  when introspection is configured) is its business: valid → the subject's
  :class:`~mcp_reconciler.api.mcp_auth.McpIdentity`, refused → the
  :class:`~mcp_reconciler.api.oauth.challenge.AuthFailure` the guard answers with (401
  ``invalid_token`` with its description, 403 ``insufficient_scope``, 503 with ``Retry-After``).
* :class:`ControlBearer`, an ASGI guard for ``/v1``: a bearer token that is not a static control
  token and is the resource server's kind is validated; the caller's
  :class:`~mcp_reconciler.api.auth.Principal` goes into the ASGI scope (``PRINCIPAL_KEY``), where
  the handlers read it. Static tokens (and a request without a token) pass untouched: the
  handlers authenticate them as before.
* the RFC 9728 metadata routes, and the ``resource_metadata`` URL and scopes for ``/mcp``'s
  challenges.

Identity mapping (ADR 0011): the principal is (issuer, subject, client id),
``oauth:<issuer>:<subject>#<client>`` (a token without ``sub`` is its client); on ``/mcp`` its
sessions get the grant set the claim rules give *that token*, and an operator (operator scope or
claim) may use the control tools and sees the operator's status; on ``/v1`` the operator is an
operator, everyone else an owner of its own sessions. The same principal owns what it creates on
either endpoint. A legacy MCP session is bound to the principal (the SDK's session manager and
the front door compare it) and to the grants of the token that opened it: a refreshed token of
the same subject and client with the same grants keeps its session; another subject's or another
client's token gets 404, and one with other grants is refused (-32018 ``grants_changed``).

The client's token stops here: nothing on the way to an upstream carries it (upstream credentials
are per source, ``reconciler/upstream_auth.py``). Nothing of a token is logged; refusals are
counted by reason (``frontdoor.auth.refused`` on ``/mcp``, ``control.auth.refused`` on ``/v1``)."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence

from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_reconciler.api.auth import PRINCIPAL_KEY, Authenticator, Principal
from mcp_reconciler.api.mcp_auth import McpIdentity, bearer_token
from mcp_reconciler.api.oauth.challenge import AuthFailure, authorization_header
from mcp_reconciler.api.oauth.identity import Identity
from mcp_reconciler.api.oauth.metadata import metadata_routes
from mcp_reconciler.api.oauth.resource_server import ResourceServer
from mcp_reconciler.reconciler import telemetry

__all__ = ["AccessTokens", "ControlBearer", "OAuthEdge", "control_principal", "mcp_identity"]

_control_refusals = telemetry.meter.create_counter(
    "control.auth.refused", description="/v1 access tokens refused by the OAuth edge, by reason"
)

#: /v1's error codes per status (its ``{"error": {"code", "message"}}`` shape, ``api/routes.py``).
_CONTROL_CODES = {401: "unauthenticated", 403: "forbidden", 503: "unavailable"}


@functools.lru_cache(maxsize=4096)
def mcp_identity(identity: Identity) -> McpIdentity:
    """The ``/mcp`` identity of an accepted access token (cached: the token cache hands back the
    same :class:`Identity` object for every request with the same token)."""
    principal = identity.principal
    return McpIdentity(
        principal=str(principal),  # oauth:<issuer>:<subject>[#<client>] (ADR 0011)
        grants=identity.grants,
        control_tools=identity.is_operator,
        operator=identity.is_operator,
    )


@functools.lru_cache(maxsize=4096)
def control_principal(identity: Identity) -> Principal:
    """The ``/v1`` principal of an accepted access token: operator or owner by its roles, with
    the same principal id (``oauth:<issuer>:<subject>``) as on ``/mcp`` (cached like
    :func:`mcp_identity`)."""
    principal = identity.principal
    return Principal(
        "operator" if identity.is_operator else "owner", principal.subject, principal.issuer, principal.client
    )


class AccessTokens:
    """OAuth access tokens as a ``/mcp`` credential source (module docstring)."""

    def __init__(self, server: ResourceServer) -> None:
        self._server = server

    async def identify(self, token: str) -> McpIdentity | None:
        """The token's identity; ``None`` when it is not the resource server's kind of token;
        :class:`AuthFailure` when it is and is refused."""
        server = self._server
        identity = server.cached_token(token)
        if identity is None:
            if not server.handles(token):
                return None
            identity = await server.require_token(token, "mcp")
        else:
            server.authorize(identity, "mcp")
        return mcp_identity(identity)


class ControlBearer:
    """ASGI guard for ``/v1`` (module docstring). Other paths pass through untouched."""

    def __init__(self, app: ASGIApp, server: ResourceServer, static: Authenticator | None) -> None:
        self.app = app
        self.server = server
        self.static = static

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass a ``/v1`` request on with the :class:`Principal` of its access token in the scope,
        or answer the token's refusal (the ``/v1`` error shape plus the challenge); static
        tokens, other credentials and other paths pass untouched."""
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        authorization = authorization_header(scope)
        token = bearer_token(authorization)
        server = self.server
        try:
            # A token seen before is answered by the cache (static tokens never are: this
            # resource server knows access tokens only); then static tokens, as before.
            identity = server.cached_token(token) if token is not None else None
            if identity is not None:
                server.authorize(identity, "owner")
            elif (
                token is None
                or (self.static is not None and self.static.authenticate(authorization) is not None)
                or not server.handles(token)
            ):
                await self.app(scope, receive, send)  # the handlers' static authentication decides
                return
            else:
                identity = await server.require_token(token, "owner")
        except AuthFailure as failure:
            await self._refuse(send, failure)
            return
        scope[PRINCIPAL_KEY] = control_principal(identity)
        await self.app(scope, receive, send)

    async def _refuse(self, send: Send, failure: AuthFailure) -> None:
        _control_refusals.add(1, {"reason": failure.reason})
        body = json.dumps(
            {"error": {"code": _CONTROL_CODES.get(failure.status, "unauthenticated"), "message": failure.description}}
        ).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        headers += [
            (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in self.server.challenge(failure).items()
        ]
        await send({"type": "http.response.start", "status": failure.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class OAuthEdge:
    """What the HTTP edge needs from an ``oauth:`` section (module docstring). ``server`` is
    borrowed: its owner (``serve_http``) closes it."""

    def __init__(self, server: ResourceServer, static: Authenticator | None) -> None:
        assert server.config is not None, "an OAuthEdge needs a configured resource server"
        self.server = server
        self.static = static
        self.credentials = AccessTokens(server)
        self.routes = metadata_routes(server.config)
        self.resource_metadata_url = server.resource_metadata_url
        self.scope: Sequence[str] = server.config.roles.required_scopes

    def control(self, app: ASGIApp) -> ControlBearer:
        """``app`` behind the ``/v1`` guard."""
        return ControlBearer(app, self.server, self.static)
