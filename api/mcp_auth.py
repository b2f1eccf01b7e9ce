"""Who is calling ``/mcp`` (I16): credentials are checked at the HTTP layer, before the MCP SDK
sees the request — so an unauthenticated request never creates a transport session, an event
store or a gateway session.

:class:`McpGuard` is the credentials step of ``/mcp``'s edge pipeline
(``api/plane/pipeline.py``). For every HTTP request:

- ``Authorization: Bearer <token>``: each :class:`CredentialSource` in turn may claim the token
  (:class:`SessionTokens`: a session token issued by ``POST /v1/sessions`` or declared in the
  config; with an ``oauth:`` section, ``api/oauth/edge.py``'s access tokens after them). No
  source claims it → **401** with ``WWW-Authenticate: Bearer error="invalid_token"``. A source
  may also refuse a token of its own kind with a specific :class:`AuthFailure` (an expired
  access token: 401 ``invalid_token`` with its ``error_description``; a missing scope: 403
  ``insufficient_scope``; its issuer's keys unavailable: 503), answered as it says. A deleted
  session's token is no longer claimed. Any other ``Authorization`` value (``Basic …``, an empty
  bearer) is an invalid credential too: a client that sent one is never served as anonymous.
- no ``Authorization`` header: the anonymous identity when the config opens anonymous access
  (``gateway.anonymous``, with its own grant policy), else **401** with ``WWW-Authenticate:
  Bearer`` (RFC 6750 §3.1: no error code when no credential was sent).

The accepted :class:`McpIdentity` goes into the ASGI scope under :data:`IDENTITY_KEY`, where
the front door reads it
(``api/frontdoor/sessions.py``). The guard also sets ``scope["user"]`` to the MCP SDK's
``AuthenticatedUser`` for the identity's *principal*: the SDK's session manager remembers who
opened a 2025-11-25 (stateful) session and answers **404** to a request on that session from
anyone else — another credential, or none. 404, not 401/403: to the other caller that session
does not exist (the spec's answer for an unknown ``Mcp-Session-Id``, which makes a client start
a new session), and its existence is not confirmed. The front door checks the same binding
again (defence in depth). A rotated token of the same session is the same principal, so it keeps
its transport session.

stdio (``mcp-reconciler stdio``) has no HTTP layer and no guard: it is a local, single-user
transport whose identity is the process owner (``local::<user>``), served with
``gateway.grant_policy``.

With OAuth configured every challenge also names the RFC 9728 metadata
(``resource_metadata="…"``) and the scopes any token needs (``scope="…"``), so a client that only
knows the MCP specification can discover where to get a token. Refusals are counted
(``frontdoor.auth.refused``, by reason).

The 401 body is the RFC 6749 error object (``{"error", "error_description"}``); nothing from the
request — least of all the token — is echoed, and tokens are never logged."""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.authentication import AuthCredentials
from starlette.types import Scope

from mcp_reconciler.api.http_limits import Refusal
from mcp_reconciler.api.oauth.challenge import AuthFailure, authorization_header, www_authenticate
from mcp_reconciler.api.oauth.identity import GrantSet
from mcp_reconciler.reconciler import audit, telemetry
from mcp_reconciler.reconciler.authority import Authority, principal_id

__all__ = [
    "ANONYMOUS",
    "IDENTITY_KEY",
    "CredentialSource",
    "GrantSet",
    "McpGuard",
    "McpIdentity",
    "SessionTokens",
    "bearer_token",
]

log = logging.getLogger("mcp_reconciler.mcp_auth")

#: Where the accepted identity lives in the ASGI scope. Not the OAuth guard's key
#: (``api.oauth.guard.IDENTITY_KEY`` holds its ``Identity``): an OAuth resource server plugs in
#: here as one more :class:`CredentialSource`, whose identities become :class:`McpIdentity`.
IDENTITY_KEY = "mcp_reconciler.mcp_identity"

_refusals = telemetry.meter.create_counter(
    "frontdoor.auth.refused",
    description="/mcp requests refused at the HTTP layer, by reason (missing, invalid, expired, audience, ...)",
)


@dataclass(frozen=True, slots=True)
class McpIdentity:
    """An accepted ``/mcp`` caller.

    ``principal`` is its role-qualified principal id (``session::<id>``, ``anonymous::``,
    ``local::<user>``; an OAuth subject will be ``oauth:<issuer>:<subject>``). ``session_id``:
    the gateway session the credential *is* (a session token); ``None`` means the front door
    creates one per ``grants`` (one per legacy MCP session, one shared per principal in the
    sessionless 2026 era). ``control_tools``: may call the built-in control tools;
    ``operator``: sees the operator's full status through them (config paths included)."""

    principal: str
    session_id: str | None = None
    grants: GrantSet | None = None
    control_tools: bool = False
    operator: bool = False

    @property
    def namespace(self) -> str:
        """The principal's namespace (``session``, ``anonymous``, ``local``, …)."""
        return self.principal.partition(":")[0]


#: The identity of a request without any credential, when anonymous access is configured.
ANONYMOUS = principal_id("anonymous", "")


class CredentialSource(Protocol):
    """Turns a bearer token into an identity. Returns ``None`` when the token is not one of its
    credentials (the guard then asks the next source); raises only :class:`AuthFailure`, for a
    token of its own kind that it refuses (the guard answers with that failure's status and
    challenge); never logs a token."""

    async def identify(self, token: str) -> McpIdentity | None:
        """The identity ``token`` stands for, or None if it is not one of this source's credentials."""


class SessionTokens:
    """The session tokens of the engine's authority as a credential source: a token is its
    session (``session::<id>``), in either era, for as long as the session exists."""

    def __init__(self, authority: Authority) -> None:
        self._authority = authority

    async def identify(self, token: str) -> McpIdentity | None:
        """The identity of the session ``token`` authenticates (constant-time compare), or ``None``."""
        # A miss may be a session another replica created a moment ago: the authority asks the
        # cluster store (when there is one) before saying no.
        session = self._authority.by_token(token) or await self._authority.load_token(token)
        if session is None:
            return None
        # Whether it may use the control tools is read from the session itself, per call (a
        # config reload can take it away); the identity only says which session it is.
        return McpIdentity(principal=principal_id("session", session.id), session_id=session.id)


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` value (scheme case-insensitive,
    surrounding whitespace ignored), or ``None``."""
    if not authorization or authorization[:7].lower() != "bearer ":
        return None
    return authorization[7:].strip() or None


@functools.lru_cache(maxsize=4096)
def sdk_user(identity: McpIdentity) -> AuthenticatedUser:
    """The MCP SDK's view of ``identity``, keyed by its principal (``client_id`` = namespace,
    ``iss`` = issuer, ``subject``), so the SDK binds a stateful session to the principal. The
    credential itself is not kept. Cached per identity (bounded): building the SDK's models costs
    more than the token lookup."""
    namespace, _, rest = identity.principal.partition(":")
    issuer, _, subject = rest.partition(":")
    return AuthenticatedUser(
        AccessToken(token="", client_id=namespace, scopes=[], subject=subject, claims={"iss": issuer})
    )


_DESCRIPTIONS = {
    "missing": "a bearer token is required (a session token from POST /v1/sessions or the config)",
    "invalid": "the bearer token is not valid",
}


class McpGuard:
    """The credentials step of ``/mcp`` (module docstring): an accepted identity, or the refusal.
    ``anonymous()`` is read per request — the grant spec anonymous callers get, or ``None`` when
    anonymous access is off — so a config reload that turns it off takes effect at once.
    ``resource_metadata_url`` and ``scope`` (the scopes every access token needs) go into every
    challenge when set (OAuth, ADR 0011)."""

    def __init__(
        self,
        *,
        credentials: Sequence[CredentialSource],
        anonymous: Callable[[], GrantSet | None] = lambda: None,
        resource_metadata_url: str | None = None,
        scope: Sequence[str] = (),
    ) -> None:
        self.credentials = tuple(credentials)
        self.anonymous = anonymous
        self.resource_metadata_url = resource_metadata_url
        self.scope = tuple(scope)

    async def admit(self, scope: Scope) -> McpIdentity | Refusal:
        """The identity of the request's bearer token (the first source that accepts it) or,
        without a credential, anonymous when that is on — put into ``scope`` under
        :data:`IDENTITY_KEY`; otherwise a 401 (or a source's own refusal: 403, 503) with a
        ``WWW-Authenticate`` challenge."""
        authorization = authorization_header(scope)
        identity: McpIdentity | None = None
        if authorization is None:
            grants = self.anonymous()
            if grants is None:
                return self._refusal("missing")
            identity = McpIdentity(principal=ANONYMOUS, grants=grants)
        else:
            token = bearer_token(authorization)
            if token is not None:
                try:
                    for source in self.credentials:
                        identity = await source.identify(token)
                        if identity is not None:
                            break
                except AuthFailure as failure:
                    return _refused(
                        failure.reason,
                        failure.status,
                        failure.headers(self.resource_metadata_url),
                        failure.body(),
                    )
            if identity is None:
                return self._refusal("invalid")
            user = sdk_user(identity)
            scope["user"] = user
            scope["auth"] = AuthCredentials(user.scopes)
        scope[IDENTITY_KEY] = identity
        return identity

    def _refusal(self, reason: str) -> Refusal:
        error = "invalid_token" if reason == "invalid" else None
        challenge = www_authenticate(
            self.resource_metadata_url, error=error, description=_DESCRIPTIONS[reason], scope=self.scope
        )
        body = {"error": error or "invalid_request", "error_description": _DESCRIPTIONS[reason]}
        return _refused(reason, 401, {"www-authenticate": challenge}, body)


def _refused(reason: str, status: int, headers: dict[str, str], body: dict[str, str]) -> Refusal:
    _refusals.add(1, {"reason": reason})
    audit.record("credential.refused", reason=reason, status=status, outcome="refused", detail="/mcp")
    extra = ((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items())
    return Refusal.json(status, json.dumps(body).encode(), *extra)
