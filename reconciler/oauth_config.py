"""The OAuth parts of the config file, as data: the gateway as an OAuth 2.1 resource server
(the top-level ``oauth:`` section) and OAuth client credentials for one upstream (``oauth:`` under a
source's ``http:`` or ``sse:``).

These are plain frozen pydantic models so that :mod:`reconciler.config` reports their problems like
every other key (``file:line: field: message``). Nothing here validates a token or opens a
connection: the resource server lives at the HTTP edge (``api/oauth/``), the upstream token client
in :mod:`reconciler.upstream_auth`. No HTTP framework is imported here.

Security rules enforced at load time, so a bad config never starts serving:

* algorithms are asymmetric only: ``none`` and every ``HS*`` are refused (an ``HS256`` token
  "signed" with an issuer's *public* key is the classic key-confusion forgery);
* issuer, metadata, JWKS, introspection and token URLs are ``https://`` except on loopback
  (``http://127.0.0.1``, ``localhost``, ``[::1]``: local development and tests);
* a bounded number of issuers, keys, cached tokens and bytes fetched.

Secrets (``client_secret``) are expected as ``${VAR}``; :mod:`reconciler.config` interpolates them
and their ``repr`` stays the template."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

__all__ = [
    "ASYMMETRIC_ALGORITHMS",
    "DEFAULT_ALGORITHMS",
    "GrantRules",
    "IntrospectionConfig",
    "IssuerConfig",
    "JwksPolicy",
    "OAuthConfig",
    "RoleRules",
    "TokenCachePolicy",
    "UpstreamOAuthConfig",
    "is_loopback_url",
]

#: Every JWS algorithm the resource server can verify (all asymmetric). ``none`` and ``HS*`` are
#: absent on purpose and can never be configured.
ASYMMETRIC_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
DEFAULT_ALGORITHMS: tuple[str, ...] = ("RS256", "PS256", "ES256", "ES384", "EdDSA")

_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
MAX_ISSUERS = 8


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def is_loopback_url(url: str) -> bool:
    """Whether ``url`` names a loopback host (where plain ``http://`` is acceptable)."""
    return (urlsplit(url).hostname or "") in _LOOPBACK


def _check_url(value: str, *, allow_query: bool = True) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise PydanticCustomError("url", "not an http:// or https:// URL")
    if parts.scheme == "http" and not is_loopback_url(value):
        raise PydanticCustomError("insecure_url", "must be https:// (plain http:// only on loopback)")
    if parts.fragment or (not allow_query and parts.query):
        raise PydanticCustomError("url", "must not have a fragment" + ("" if allow_query else " or a query"))
    return value


def _check_algorithms(value: tuple[str, ...]) -> tuple[str, ...]:
    if not value:
        raise PydanticCustomError("algorithms", "at least one algorithm is required")
    bad = [alg for alg in value if alg not in ASYMMETRIC_ALGORITHMS]
    if bad:
        raise PydanticCustomError(
            "algorithms",
            "not allowed: {bad} (asymmetric only; 'none' and HS* are never accepted)",
            {"bad": ", ".join(sorted(set(bad)))},
        )
    return value


# --------------------------------------------------------------------------------------------
# The gateway as a resource server


class JwksPolicy(_Frozen):
    """How an issuer's signing keys are fetched and kept (ADR 0011).

    Keys younger than ``refresh_interval_s`` are used as they are. Older keys are refetched by the
    next validation that needs them (one fetch for all concurrent callers); if that fetch fails,
    keys younger than ``max_stale_s`` keep working and older ones are not used at all (fail
    closed). A token naming an unknown ``kid`` refetches at most once per
    ``min_refetch_interval_s`` (rotation), so garbage tokens cannot hammer the issuer."""

    refresh_interval_s: float = Field(
        default=300.0, gt=0, le=86_400, description="Keys younger than this (seconds) are used without refetching."
    )
    max_stale_s: float = Field(
        default=3600.0,
        gt=0,
        le=7 * 86_400,
        description="While refetching fails, keys younger than this keep working; older ones are not used.",
    )
    min_refetch_interval_s: float = Field(
        default=30.0,
        ge=0,
        le=3600,
        description="A token naming an unknown `kid` refetches the keys at most this often (seconds).",
    )
    max_keys: int = Field(default=32, ge=1, le=1024, description="Most keys read from one JWKS document.")
    max_bytes: int = Field(
        default=64 * 1024, ge=1024, le=4 * 1024 * 1024, description="Largest JWKS document read, in bytes."
    )
    fetch_timeout_s: float = Field(
        default=5.0, gt=0, le=60, description="Seconds one fetch of metadata or keys may take."
    )

    @model_validator(mode="after")
    def _stale_covers_refresh(self) -> JwksPolicy:
        if self.max_stale_s < self.refresh_interval_s:
            raise PydanticCustomError("jwks_bounds", "max_stale_s must be at least refresh_interval_s")
        return self


class TokenCachePolicy(_Frozen):
    """Validated tokens are cached (keyed by a SHA-256 of the token, never the token) until
    ``min(exp, validated_at + ttl_s)``; least recently used entries go first past ``max_entries``."""

    max_entries: int = Field(
        default=10_000, ge=1, le=1_000_000, description="Most validated tokens cached; least recently used go first."
    )
    ttl_s: float = Field(
        default=300.0, gt=0, le=86_400, description="Longest a validated token is cached (seconds; never past its exp)."
    )


class IntrospectionConfig(_Frozen):
    """RFC 7662 introspection for opaque (non-JWT) tokens of one issuer. The gateway
    authenticates to the endpoint with HTTP Basic (``client_id``/``client_secret``).

    An answer is cached like a validated JWT, but at most ``cache_ttl_s``: that is how long a
    revoked token may still be accepted."""

    url: str = Field(description="The RFC 7662 introspection endpoint URL.")
    client_id: str = Field(min_length=1, description="The gateway's client id at the endpoint (HTTP Basic).")
    client_secret: str = Field(
        min_length=1, description="The gateway's client secret at the endpoint; write `${VAR}` (a secret)."
    )
    cache_ttl_s: float = Field(
        default=60.0,
        gt=0,
        le=3600,
        description="Longest an introspection answer is cached: how long a revoked token may still be accepted.",
    )
    timeout_s: float = Field(default=5.0, gt=0, le=60, description="Seconds one introspection request may take.")

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return _check_url(value)


class IssuerConfig(_Frozen):
    """One trusted authorization server.

    Its keys come from ``jwks_url`` if given, else from the ``jwks_uri`` of its metadata:
    ``metadata_url`` if given, else RFC 8414 ``/.well-known/oauth-authorization-server`` and then
    OpenID ``/.well-known/openid-configuration`` derived from ``issuer``. The metadata must name
    exactly this ``issuer`` (RFC 8414 §3.3)."""

    issuer: str = Field(
        description="The issuer identifier (its `iss`): an https URL (http only on loopback), no query or fragment."
    )
    metadata_url: str | None = Field(
        default=None,
        description="Its metadata URL (default: RFC 8414, then OpenID well-known URLs derived from `issuer`).",
    )
    jwks_url: str | None = Field(
        default=None, description="Its signing keys' URL (default: the `jwks_uri` of its metadata)."
    )
    algorithms: tuple[str, ...] = Field(
        default=DEFAULT_ALGORITHMS, description="The JWS algorithms accepted in its tokens."
    )
    introspection: IntrospectionConfig | None = Field(
        default=None, description="RFC 7662 introspection for its opaque (non-JWT) tokens (one issuer at most)."
    )

    @field_validator("issuer")
    @classmethod
    def _issuer(cls, value: str) -> str:
        return _check_url(value, allow_query=False)

    @field_validator("metadata_url", "jwks_url")
    @classmethod
    def _urls(cls, value: str | None) -> str | None:
        return None if value is None else _check_url(value)

    @field_validator("algorithms")
    @classmethod
    def _algorithms(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _check_algorithms(value)


class RoleRules(_Frozen):
    """Which tokens get which role.

    Every accepted token must carry all of ``required_scopes`` (else 403 ``insufficient_scope``).
    A token with any of ``operator_scopes``, or whose claim ``c`` holds one of
    ``operator_claims[c]`` (a string or a list of strings), is an **operator** (``/v1``
    administration); every other accepted token is an **owner** (its own sessions only)."""

    required_scopes: tuple[str, ...] = Field(
        default=(), description="Scopes every accepted token must carry (else 403 insufficient_scope)."
    )
    operator_scopes: tuple[str, ...] = Field(
        default=(), description="A token with any of these scopes is an operator (/v1 administration)."
    )
    operator_claims: dict[str, tuple[str, ...]] = Field(
        default_factory=dict,
        description="Claim name to values: a token whose claim holds one of them (a string or a list) is an operator.",
    )

    @field_validator("required_scopes", "operator_scopes")
    @classmethod
    def _scopes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if any(not s or any(c.isspace() or c in '"\\' for c in s) for s in value):
            raise PydanticCustomError("scope", "a scope is a non-empty token without spaces, quotes or backslashes")
        return value


class GrantRules(_Frozen):
    """The grant set of MCP sessions a token opens.

    ``policy``: ``current`` (every name visible at creation), ``none`` (nothing until granted), or
    ``explicit``: exactly the names the token carries — each scope ``<scope_prefix><name>`` and
    each string in the claim ``claim`` (bounded like every grant: 1,024 names)."""

    policy: Literal["current", "none", "explicit"] = Field(
        default="current",
        description="`current` (every name visible at creation), `none` (nothing until granted) or `explicit` "
        "(the names the token carries).",
    )
    scope_prefix: str | None = Field(
        default=None, min_length=1, description="With `explicit`: each scope `<scope_prefix><name>` grants `<name>`."
    )
    claim: str | None = Field(
        default=None, min_length=1, description="With `explicit`: each string in this claim is a granted name."
    )

    @model_validator(mode="after")
    def _explicit_has_a_source(self) -> GrantRules:
        if self.policy == "explicit" and self.scope_prefix is None and self.claim is None:
            raise PydanticCustomError(
                "grants", "policy 'explicit' needs scope_prefix or claim (where the names come from)"
            )
        return self


class OAuthConfig(_Frozen):
    """The top-level ``oauth:`` section: accept access tokens from these issuers on ``/mcp`` and ``/v1``.

    ``resource`` is this gateway's resource identifier (RFC 8707; the public URL of its ``/mcp``
    endpoint): a token is accepted only when its ``aud`` names it — a token minted for another
    resource is refused. ``audience`` overrides the expected ``aud`` for providers that cannot
    put a URL there (the protected resource metadata still names ``resource``)."""

    resource: str = Field(
        description="This gateway's resource identifier (RFC 8707): the public URL of its /mcp endpoint; "
        "a token's `aud` must name it."
    )
    audience: str | None = Field(
        default=None, min_length=1, description="The `aud` expected instead of `resource`, for providers that need it."
    )
    resource_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="A readable name in the protected resource metadata.",
    )
    issuers: tuple[IssuerConfig, ...] = Field(description="The trusted authorization servers (1 to 8).")
    scopes_supported: tuple[str, ...] | None = Field(
        default=None, description="The scopes advertised in the protected resource metadata."
    )
    leeway_s: float = Field(
        default=30.0, ge=0, le=300, description="Clock skew allowed when checking exp, nbf and iat (seconds)."
    )
    require_at_jwt: bool = Field(
        default=False, description="true: JWTs must be typed `at+jwt` (RFC 9068 access tokens)."
    )
    roles: RoleRules = Field(default_factory=RoleRules, description="Which tokens are operators, which owners.")
    grants: GrantRules = Field(default_factory=GrantRules, description="The grant set of sessions a token opens.")
    jwks: JwksPolicy = Field(default_factory=JwksPolicy, description="How issuers' signing keys are fetched and kept.")
    token_cache: TokenCachePolicy = Field(
        default_factory=TokenCachePolicy, description="How validated tokens are cached."
    )

    @field_validator("resource")
    @classmethod
    def _resource(cls, value: str) -> str:
        return _check_url(value, allow_query=False)

    @field_validator("issuers")
    @classmethod
    def _issuers(cls, value: tuple[IssuerConfig, ...]) -> tuple[IssuerConfig, ...]:
        # A validator, not Field(min_length=...): pydantic would also report "0 items" when one
        # entry is invalid.
        if not 1 <= len(value) <= MAX_ISSUERS:
            raise PydanticCustomError("issuers", "list 1 to {n} issuers", {"n": MAX_ISSUERS})
        seen = [i.issuer for i in value]
        if len(set(seen)) != len(seen):
            raise PydanticCustomError("issuers", "an issuer is listed twice")
        if sum(i.introspection is not None for i in value) > 1:
            # An opaque token carries no issuer: offering it to several servers would hand
            # clients' tokens to servers that never issued them.
            raise PydanticCustomError("issuers", "at most one issuer may configure introspection")
        return value

    @property
    def expected_audience(self) -> str:
        """The ``aud`` value a token must carry."""
        return self.audience or self.resource


# --------------------------------------------------------------------------------------------
# Upstream client credentials


class UpstreamOAuthConfig(_Frozen):
    """OAuth 2.1 client credentials the gateway uses *as a client* of one HTTP upstream.

    The gateway asks ``token_url`` for an access token (``grant_type=client_credentials``, with
    ``scopes`` and, when given, RFC 8707 ``resource`` / ``audience``), caches it, renews it
    ``refresh_skew_s`` before it expires (or after the upstream answers 401), and sends it as
    the upstream's ``Authorization: Bearer``. A client's own token is never forwarded upstream."""

    token_url: str = Field(description="The authorization server's token endpoint URL.")
    client_id: str = Field(min_length=1, description="The gateway's client id there.")
    client_secret: str = Field(
        min_length=1, description="The gateway's client secret there; write `${VAR}` (a secret)."
    )
    scopes: tuple[str, ...] = Field(default=(), description="Scopes asked for.")
    resource: str | None = Field(default=None, description="RFC 8707 `resource` sent with the request.")
    audience: str | None = Field(default=None, min_length=1, description="`audience` sent with the request.")
    auth_method: Literal["client_secret_basic", "client_secret_post"] = Field(
        default="client_secret_basic", description="How the client authenticates: HTTP Basic or form fields."
    )
    refresh_skew_s: float = Field(
        default=60.0, ge=0, le=3600, description="Renew the token this long (seconds) before it expires."
    )
    timeout_s: float = Field(default=10.0, gt=0, le=120, description="Seconds one token request may take.")

    @field_validator("token_url")
    @classmethod
    def _token_url(cls, value: str) -> str:
        # ${VAR} in the URL is checked after interpolation (reconciler.config), not here.
        return value if "${" in value else _check_url(value)

    @field_validator("resource")
    @classmethod
    def _resource(cls, value: str | None) -> str | None:
        return value if value is None or "${" in value else _check_url(value, allow_query=False)
