"""JWT access-token validation (RFC 9068 profile, RFC 8707 audience) with PyJWT.

Order of checks, and why:

1. **Shape and header**, before any key is touched: three segments (a JWE or anything else is
   not a token we validate); ``alg`` on the issuer's allow-list (asymmetric only, never
   ``none``/``HS*``: see :mod:`reconciler.oauth_config`); no ``crit`` header (we understand no
   extensions, RFC 7515 §4.1.11); ``typ`` absent, ``JWT`` or ``at+jwt`` (``require_at_jwt``:
   only ``at+jwt``), so an ID token, logout token or DPoP proof is not an access token.
2. **Issuer**, read unverified only to choose whose keys to try; it is verified with the
   signature in step 4. An issuer that is not configured is refused without any fetch.
3. **Key**: by ``kid`` from the issuer's JWKS (:class:`~api.oauth.jwks.IssuerKeys`: cached,
   refreshed within bounds). Keys are asymmetric and bound to their algorithm family.
4. **Signature, then claims** (PyJWT, with an explicit one-algorithm list and the key): ``exp``
   required, ``exp``/``nbf``/``iat`` with ``leeway_s``; ``iss`` exactly the configured issuer;
   ``aud`` containing this resource. Claims are judged only after the signature verified, so
   only a holder of a genuinely issued token learns "expired" or "wrong audience".

Failures raise :class:`~api.oauth.challenge.AuthFailure` with a fixed reason; PyJWT's own
messages (which may quote claims) never leave this module. Validation here is the *cold* path:
:class:`~api.oauth.resource_server.ResourceServer` caches what it returns."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx2
import jwt
from jwt import exceptions as jwt_errors

from mcp_reconciler.api.oauth.challenge import AuthFailure, Reason
from mcp_reconciler.api.oauth.claims import identity_from_claims
from mcp_reconciler.api.oauth.identity import Identity
from mcp_reconciler.api.oauth.jwks import IssuerKeys
from mcp_reconciler.reconciler.oauth_config import OAuthConfig

__all__ = ["JwtValidator", "looks_like_jwt"]

_TYP_ANY = frozenset({"jwt", "at+jwt", "application/at+jwt"})
_TYP_AT = frozenset({"at+jwt", "application/at+jwt"})
_MAX_TOKEN_CHARS = 16 * 1024

#: PyJWT exception → our reason. Order matters: subclasses first (``InvalidSignatureError`` is
#: a ``DecodeError``).
_ERRORS: tuple[tuple[type[Exception], Reason], ...] = (
    (jwt_errors.InvalidSignatureError, "signature"),
    (jwt_errors.ExpiredSignatureError, "expired"),
    (jwt_errors.ImmatureSignatureError, "not_yet_valid"),
    (jwt_errors.InvalidAudienceError, "audience"),
    (jwt_errors.InvalidIssuerError, "issuer"),
    (jwt_errors.MissingRequiredClaimError, "claims"),
    (jwt_errors.InvalidIssuedAtError, "claims"),
    (jwt_errors.InvalidAlgorithmError, "algorithm"),
)


def looks_like_jwt(token: str) -> bool:
    """A JWS compact serialization has exactly three dot-separated segments."""
    return token.count(".") == 2


def _reason(exc: Exception) -> Reason:
    for cls, reason in _ERRORS:
        if isinstance(exc, cls):
            return reason
    return "malformed"


class JwtValidator:
    """Validates JWT access tokens from the configured issuers; see the module docstring.

    ``clock`` (monotonic) drives key freshness, ``wallclock`` (epoch seconds) token times; both
    are injectable for tests. The ``httpx2`` client is borrowed, not owned."""

    def __init__(
        self,
        config: OAuthConfig,
        http: httpx2.AsyncClient,
        *,
        clock: Callable[[], float] = time.monotonic,
        wallclock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self._wallclock = wallclock
        self.issuers: dict[str, IssuerKeys] = {
            issuer.issuer: IssuerKeys(issuer, config.jwks, http, clock=clock) for issuer in config.issuers
        }
        self._algorithms = frozenset(alg for issuer in config.issuers for alg in issuer.algorithms)

    def _header(self, token: str) -> tuple[str, str | None]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt_errors.PyJWTError:
            raise AuthFailure("malformed") from None
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self._algorithms:
            raise AuthFailure("algorithm")
        if "crit" in header:
            raise AuthFailure("unsupported_token")
        typ = header.get("typ")
        if typ is None:
            if self.config.require_at_jwt:
                raise AuthFailure("unsupported_token")
        elif not isinstance(typ, str) or typ.lower() not in (_TYP_AT if self.config.require_at_jwt else _TYP_ANY):
            raise AuthFailure("unsupported_token")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise AuthFailure("malformed")
        return alg, kid

    async def validate(self, token: str) -> Identity:
        """The identity of a valid access token, or :class:`AuthFailure`."""
        if len(token) > _MAX_TOKEN_CHARS or not looks_like_jwt(token):
            raise AuthFailure("malformed" if len(token) > _MAX_TOKEN_CHARS else "unsupported_token")
        alg, kid = self._header(token)
        try:
            unverified: dict[str, Any] = jwt.decode(token, options={"verify_signature": False})
        except jwt_errors.PyJWTError:
            raise AuthFailure("malformed") from None
        issuer = unverified.get("iss")
        keys = self.issuers.get(issuer) if isinstance(issuer, str) else None
        if keys is None:
            raise AuthFailure("issuer")
        if alg not in keys.issuer.algorithms:
            raise AuthFailure("algorithm")
        candidates = await keys.keys_for(kid, alg)
        claims: dict[str, Any] | None = None
        for key in candidates:
            try:
                claims = jwt.decode(
                    token,
                    key,
                    algorithms=[alg],
                    audience=self.config.expected_audience,
                    issuer=keys.issuer.issuer,
                    leeway=self.config.leeway_s,
                    options={"require": ["exp", "iss", "aud"]},
                )
                break
            except jwt_errors.InvalidSignatureError:
                continue  # several candidates only when the token names no kid
            except jwt_errors.PyJWTError as exc:
                raise AuthFailure(_reason(exc)) from None
        if claims is None:
            raise AuthFailure("signature")
        return identity_from_claims(
            claims, issuer=keys.issuer.issuer, scheme="jwt", roles=self.config.roles, grants=self.config.grants
        )
