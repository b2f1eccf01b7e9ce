"""RFC 7662 token introspection for opaque (non-JWT) access tokens.

Only one issuer may be configured with introspection (checked when the config loads): sending
a token to every authorization server we know until one recognises it would hand clients'
tokens to servers that never issued them.

An answer is accepted when ``active`` is true, ``iss`` (if present) is the issuer, ``aud`` names
this resource (required: an introspection answer without an audience does not say the token was
meant for us, RFC 8707), and ``exp``/``nbf`` (if present) hold with the leeway. The caller caches
the identity at most ``cache_ttl_s`` (the revocation latency). The endpoint unreachable or
answering garbage is a 503 (``introspection_unavailable``), never "valid"."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx2

from mcp_reconciler.api.oauth.challenge import AuthFailure
from mcp_reconciler.api.oauth.claims import identity_from_claims
from mcp_reconciler.api.oauth.fetch import FetchError, fetch_json
from mcp_reconciler.api.oauth.identity import Identity
from mcp_reconciler.reconciler.oauth_config import IntrospectionConfig, IssuerConfig, OAuthConfig

__all__ = ["Introspector"]

_MAX_BYTES = 64 * 1024


class Introspector:
    """Introspects opaque tokens at one issuer's RFC 7662 endpoint. ``calls`` counts requests."""

    def __init__(
        self,
        config: OAuthConfig,
        issuer: IssuerConfig,
        http: httpx2.AsyncClient,
        *,
        wallclock: Callable[[], float] = time.time,
    ) -> None:
        assert issuer.introspection is not None
        self.config = config
        self.issuer = issuer
        self.endpoint: IntrospectionConfig = issuer.introspection
        self._http = http
        self._wallclock = wallclock
        self.calls = 0

    async def introspect(self, token: str) -> Identity:
        """The identity of an active token meant for this resource, or :class:`AuthFailure`."""
        self.calls += 1
        try:
            answer = await fetch_json(
                self._http,
                self.endpoint.url,
                method="POST",
                data={"token": token, "token_type_hint": "access_token"},
                auth=(str(self.endpoint.client_id), str(self.endpoint.client_secret)),
                max_bytes=_MAX_BYTES,
                timeout_s=self.endpoint.timeout_s,
            )
        except FetchError:
            raise AuthFailure("introspection_unavailable") from None
        if answer.get("active") is not True:
            raise AuthFailure("inactive")
        iss = answer.get("iss")
        if iss is not None and iss != self.issuer.issuer:
            raise AuthFailure("issuer")
        aud = answer.get("aud")
        audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
        if self.config.expected_audience not in audiences:
            raise AuthFailure("audience")
        now = self._wallclock()
        leeway = self.config.leeway_s
        if not _time_ok(answer.get("exp"), lambda exp: exp > now - leeway):
            raise AuthFailure("expired")
        if not _time_ok(answer.get("nbf"), lambda nbf: nbf <= now + leeway):
            raise AuthFailure("not_yet_valid")
        return identity_from_claims(
            answer,
            issuer=self.issuer.issuer,
            scheme="introspection",
            roles=self.config.roles,
            grants=self.config.grants,
        )


def _time_ok(value: Any, check: Callable[[float], bool]) -> bool:
    if value is None:
        return True
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return check(float(value))
