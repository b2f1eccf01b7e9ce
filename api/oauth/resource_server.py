"""The gateway as an OAuth 2.1 resource server: one entry point that turns an ``Authorization``
header into an :class:`Identity` or an :class:`AuthFailure`, for every HTTP edge.

    rs = ResourceServer(config.oauth, Authenticator.from_env())
    async with rs:
        identity = await rs.require(request.headers.get("authorization"), "operator")

Schemes, in order: the token cache (a hit answers; see :mod:`api.oauth.cache`), static control
API tokens (``api/auth.py``; both schemes can be on at once), JWT access tokens
(:mod:`api.oauth.validator`), opaque tokens by RFC 7662 introspection when configured. Whatever
authenticated the token, its identity is cached under the token's SHA-256 until
``min(exp, now + token_cache.ttl_s)`` (static tokens: until evicted), so the steady state of
every scheme is the same hash-and-lookup.

Authorization is separate (:meth:`authorize`): ``required_scopes`` for every endpoint, the
operator role for administration. An identity is a fact about the caller; what an endpoint
needs is the endpoint's business.

A ``ResourceServer`` is immutable in its configuration: a config reload builds a new one (keys
and cache start empty). It owns an ``httpx2`` client for the authorization servers unless one
is passed in; ``aclose`` (or the ``async with`` block) closes what it owns."""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections.abc import Callable
from typing import Literal

import httpx2

from mcp_reconciler.api.auth import Authenticator, Principal
from mcp_reconciler.api.oauth.cache import TokenCache
from mcp_reconciler.api.oauth.challenge import AuthFailure
from mcp_reconciler.api.oauth.identity import Identity
from mcp_reconciler.api.oauth.introspection import Introspector
from mcp_reconciler.api.oauth.metadata import protected_resource_metadata, resource_metadata_url
from mcp_reconciler.api.oauth.validator import JwtValidator, looks_like_jwt
from mcp_reconciler.reconciler.oauth_config import OAuthConfig, TokenCachePolicy
from mcp_reconciler.reconciler.telemetry import meter, tracer

__all__ = ["Need", "ResourceServer", "bearer_token"]

log = logging.getLogger("mcp_reconciler.oauth")

validations = meter.create_counter(
    "oauth.validations", description="Token validations that missed the cache, by outcome (ok or failure reason)"
)

Need = Literal["mcp", "owner", "operator"]
"""What an endpoint needs: ``mcp`` (any accepted identity may use ``/mcp``), ``owner`` (the
owner-or-operator ``/v1`` endpoints), ``operator`` (administration)."""

_INSECURE = Identity.from_principal(Principal("operator", "insecure-no-auth"))


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (scheme case-insensitive,
    surrounding whitespace ignored), or ``None``."""
    if not authorization or authorization[:7].lower() != "bearer ":
        return None
    token = authorization[7:].strip()
    return token or None


class ResourceServer:
    """Authenticates requests by static tokens and/or OAuth access tokens; see the module doc.

    ``config`` ``None`` means static tokens only (today's behaviour, with the same identities
    and challenges). ``clock`` (monotonic) and ``wallclock`` (epoch) are injectable for tests."""

    def __init__(
        self,
        config: OAuthConfig | None,
        static: Authenticator | None = None,
        *,
        http: httpx2.AsyncClient | None = None,
        clock: Callable[[], float] = time.monotonic,
        wallclock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.static = static
        self._wallclock = wallclock
        self._owns_http = http is None and config is not None
        self._http = http if http is not None else (httpx2.AsyncClient(trust_env=True) if config is not None else None)
        policy = config.token_cache if config is not None else TokenCachePolicy()
        self.cache = TokenCache(policy.max_entries)
        self._ttl_s = policy.ttl_s
        self.validator: JwtValidator | None = None
        self.introspector: Introspector | None = None
        self.resource_metadata_url: str | None = None
        self._required: tuple[str, ...] = ()
        self._operator_scopes: tuple[str, ...] = ()
        self._static_identities: dict[Principal, Identity] = {}
        if config is not None:
            assert self._http is not None
            self.validator = JwtValidator(config, self._http, clock=clock, wallclock=wallclock)
            introspecting = [i for i in config.issuers if i.introspection is not None]
            if introspecting:
                self.introspector = Introspector(config, introspecting[0], self._http, wallclock=wallclock)
            self.resource_metadata_url = resource_metadata_url(config.resource)
            self._required = config.roles.required_scopes
            self._operator_scopes = config.roles.operator_scopes

    async def __aenter__(self) -> ResourceServer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client if this server created it (one given to it stays the caller's)."""
        if self._owns_http and self._http is not None:
            await self._http.aclose()

    def metadata(self) -> dict[str, object] | None:
        """The RFC 9728 document, or ``None`` without OAuth."""
        return None if self.config is None else protected_resource_metadata(self.config)

    # -- authentication ----------------------------------------------------------------------

    def cached(self, authorization: str | None) -> Identity | None:
        """The hot path: the identity of a token seen before and still valid, without I/O."""
        token = bearer_token(authorization)
        if token is None:
            return None
        return self.cache.get(hashlib.sha256(token.encode()).digest(), self._wallclock())

    async def authenticate(self, authorization: str | None) -> Identity:
        """The identity behind ``authorization``, or :class:`AuthFailure` (401, or 503 when the
        issuer's keys or introspection are unavailable)."""
        if self.static is not None and self.static.insecure_no_auth:
            return _INSECURE
        token = bearer_token(authorization)
        if token is None:
            raise AuthFailure("missing", scope=self._required)
        digest = hashlib.sha256(token.encode()).digest()
        now = self._wallclock()
        hit = self.cache.get(digest, now)
        if hit is not None:
            return hit
        if self.static is not None:
            principal = self.static.authenticate(authorization)
            if principal is not None:
                identity = self._static_identities.get(principal)
                if identity is None:
                    identity = self._static_identities[principal] = Identity.from_principal(principal)
                self.cache.put(digest, identity, math.inf)
                return identity
        identity = await self._validate(token)
        valid_until = now + self._ttl_s
        if identity.expires_at is not None:
            valid_until = min(valid_until, identity.expires_at)
        if identity.scheme == "introspection" and self.introspector is not None:
            valid_until = min(valid_until, now + self.introspector.endpoint.cache_ttl_s)
        self.cache.put(digest, identity, valid_until)
        return identity

    async def _validate(self, token: str) -> Identity:
        with tracer.start_as_current_span("oauth.validate") as span:
            try:
                if self.validator is not None and looks_like_jwt(token):
                    identity = await self.validator.validate(token)
                elif self.introspector is not None and not looks_like_jwt(token):
                    identity = await self.introspector.introspect(token)
                else:
                    raise AuthFailure("invalid")
            except AuthFailure as failure:
                validations.add(1, {"outcome": failure.reason})
                span.set_attribute("oauth.outcome", failure.reason)
                # The reason only: the token, its claims and its header stay out of logs.
                log.debug("access token refused: %s", failure.reason)
                raise AuthFailure(failure.reason, scope=self._required) from None
            validations.add(1, {"outcome": "ok"})
            span.set_attribute("oauth.outcome", "ok")
            span.set_attribute("oauth.scheme", identity.scheme)
            return identity

    # -- authorization -----------------------------------------------------------------------

    def authorize(self, identity: Identity, need: Need) -> None:
        """Raise :class:`AuthFailure` (403 ``insufficient_scope``) unless ``identity`` may use an
        endpoint that needs ``need``. Static identities carry no scopes and are judged by role."""
        if identity.scheme != "static":
            missing = [s for s in self._required if s not in identity.scopes]
            if missing:
                raise AuthFailure("scope", scope=self._required)
        if need == "operator" and not identity.is_operator:
            raise AuthFailure("role", scope=(*self._required, *self._operator_scopes))

    async def require(self, authorization: str | None, need: Need) -> Identity:
        """:meth:`authenticate` then :meth:`authorize`: what an edge calls per request."""
        identity = self.cached(authorization)
        if identity is None:
            identity = await self.authenticate(authorization)
        self.authorize(identity, need)
        return identity

    def challenge(self, failure: AuthFailure) -> dict[str, str]:
        """The response headers for ``failure`` (``WWW-Authenticate`` naming the metadata URL)."""
        return failure.headers(self.resource_metadata_url)
