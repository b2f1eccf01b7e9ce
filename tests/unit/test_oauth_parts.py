"""The pure parts of the resource server: challenges, the token cache's bounds, the claim
mapping, key/algorithm families, metadata URLs — and the PyJWT property the design relies on
(an HS256 token "signed" with an issuer's public key never verifies against a JWK key)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from mcp_reconciler.api.auth import Principal
from mcp_reconciler.api.oauth import AuthFailure, Identity, PrincipalId, resource_metadata_url, www_authenticate
from mcp_reconciler.api.oauth.cache import TokenCache
from mcp_reconciler.api.oauth.challenge import DESCRIPTIONS
from mcp_reconciler.api.oauth.claims import identity_from_claims
from mcp_reconciler.api.oauth.jwks import algorithm_fits, metadata_urls
from mcp_reconciler.api.oauth.metadata import protected_resource_metadata
from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.oauth_config import GrantRules, OAuthConfig, RoleRules

# -- challenges ---------------------------------------------------------------------------------------


def test_www_authenticate_forms() -> None:
    url = "https://gw.test/.well-known/oauth-protected-resource/mcp"
    assert www_authenticate(None) == "Bearer"
    assert www_authenticate(url) == f'Bearer resource_metadata="{url}"'
    assert www_authenticate(url, scope=["mcp", "mcp:admin"], error="invalid_token", description="the x") == (
        f'Bearer resource_metadata="{url}", scope="mcp mcp:admin", error="invalid_token", error_description="the x"'
    )
    # A quoted-string cannot be ended early.
    assert www_authenticate(None, error='a"b\\c') == 'Bearer error="a\\"b\\\\c"'


def test_every_reason_has_a_status_and_fixed_description() -> None:
    for reason, (status, error, description) in DESCRIPTIONS.items():
        failure = AuthFailure(reason)
        assert (failure.status, failure.error, str(failure)) == (status, error, description)
        headers = failure.headers("https://gw.test/.well-known/oauth-protected-resource")
        if status == 503:
            assert headers == {"Retry-After": "5"}
        else:
            assert status in (401, 403) and "resource_metadata=" in headers["WWW-Authenticate"]
            assert (error is None) == (reason == "missing")
    assert AuthFailure("scope").status == 403 and AuthFailure("role").error == "insufficient_scope"


# -- the token cache ----------------------------------------------------------------------------------


def _identity(name: str) -> Identity:
    return Identity(PrincipalId("oauth", "https://idp.test", name), "jwt", frozenset({"owner"}))


@pytest.mark.parametrize("n", [1, 3, 100])
def test_token_cache_holds_n_and_evicts_the_least_recent_at_n_plus_1(n: int) -> None:
    cache = TokenCache(n)
    keys = [hashlib.sha256(str(i).encode()).digest() for i in range(n + 1)]
    for i in range(n):
        cache.put(keys[i], _identity(str(i)), math.inf)
    assert len(cache) == n and all(cache.get(k, 0.0) is not None for k in keys[:n])
    cache.get(keys[0], 0.0)  # most recently used now: keys[1] is the oldest (when n > 1)
    cache.put(keys[n], _identity(str(n)), math.inf)
    assert len(cache) == n
    evicted = keys[1] if n > 1 else keys[0]
    assert evicted not in cache and keys[n] in cache
    if n > 1:
        assert keys[0] in cache


def test_token_cache_expiry_is_exclusive() -> None:
    cache = TokenCache(10)
    cache.put(b"k", _identity("a"), valid_until=100.0)
    assert cache.get(b"k", 99.999) is not None
    assert cache.get(b"k", 100.0) is None and b"k" not in cache  # dropped, not served stale
    with pytest.raises(ValueError):
        TokenCache(0)


# -- identities and claims ----------------------------------------------------------------------------


def test_static_principals_keep_their_role_as_namespace() -> None:
    op = Identity.from_principal(Principal("operator", "operator1"))
    owner = Identity.from_principal(Principal("owner", "operator1"))
    assert op.principal != owner.principal and op.owner_key == "operator::operator1"
    assert owner.owner_key == "owner::operator1" and not owner.is_operator and op.is_operator
    assert op != owner
    with pytest.raises(AttributeError):
        op.roles = frozenset()  # type: ignore[misc]


def test_claims_to_identity() -> None:
    roles = RoleRules(operator_scopes=("admin",), operator_claims={"groups": ("ops",), "role": ("root",)})
    grants = GrantRules(policy="explicit", scope_prefix="tool:", claim="mcp_tools")
    base = {"sub": "u1", "exp": 2_000_000_000, "client_id": "c1"}

    def make(**claims: object) -> Identity:
        return identity_from_claims(
            {**base, **claims}, issuer="https://idp.test", scheme="jwt", roles=roles, grants=grants
        )

    owner = make(scope="a tool:x__read tool:y__write", mcp_tools=["z__list", 7])
    assert owner.roles == {"owner"} and owner.client_id == "c1" and owner.expires_at == 2_000_000_000
    assert owner.grants is not None and owner.grants.names == {"x__read", "y__write", "z__list"}
    assert make(scp=["admin"]).is_operator  # Entra/Okta-style list claim
    assert make(scope="admin").is_operator
    assert make(groups=["dev", "ops"]).is_operator and make(role="root").is_operator
    assert not make(groups="dev").is_operator
    assert make(scope=42).scopes == frozenset()
    limit = Bounds().names_per_grant
    assert len(make(mcp_tools=[f"n{i}" for i in range(limit)]).grants.names) == limit  # type: ignore[union-attr]
    with pytest.raises(AuthFailure) as exc:
        make(mcp_tools=[f"n{i}" for i in range(limit + 1)])
    assert exc.value.reason == "claims"
    with pytest.raises(AuthFailure):
        make(mcp_tools=["x" * (Bounds().name_chars + 1)])
    with pytest.raises(AuthFailure):
        identity_from_claims({"exp": 1}, issuer="i", scheme="jwt", roles=roles, grants=grants)
    with pytest.raises(AuthFailure):
        make(scope=" ".join(f"s{i}" for i in range(257)))


# -- keys and algorithms ------------------------------------------------------------------------------


def test_algorithm_families() -> None:
    rsa_key = {"kty": "RSA", "n": "x", "e": "AQAB"}
    p256 = {"kty": "EC", "crv": "P-256"}
    ed = {"kty": "OKP", "crv": "Ed25519"}
    assert algorithm_fits("RS256", rsa_key) and algorithm_fits("PS512", rsa_key)
    assert not algorithm_fits("ES256", rsa_key) and not algorithm_fits("HS256", rsa_key)
    assert algorithm_fits("ES256", p256) and not algorithm_fits("ES384", p256)
    assert algorithm_fits("EdDSA", ed) and not algorithm_fits("EdDSA", p256)
    assert not algorithm_fits("RS384", {**rsa_key, "alg": "RS256"})  # a declared alg binds the key
    assert not algorithm_fits("HS256", {"kty": "oct", "k": "c2VjcmV0"})


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def test_pyjwt_refuses_hs256_signed_with_a_public_key_given_a_jwk_key() -> None:
    """The library property ADR 0011 relies on (beside our own allow-list): with an explicit
    algorithm list and an asymmetric key built from a JWK, an HMAC token made with the public key
    as secret does not verify — even if HS256 were on the list."""
    for private in (
        rsa.generate_private_key(public_exponent=65537, key_size=2048),
        ec.generate_private_key(ec.SECP256R1()),
    ):
        public = private.public_key()
        jwk = (RSAAlgorithm if isinstance(public, rsa.RSAPublicKey) else ECAlgorithm).to_jwk(public, as_dict=True)
        pem = public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
        payload = _b64(json.dumps({"sub": "mallory", "exp": 2_000_000_000}).encode())
        for secret in (pem, json.dumps(jwk).encode()):
            signature = _b64(hmac.new(secret, f"{header}.{payload}".encode(), hashlib.sha256).digest())
            token = f"{header}.{payload}.{signature}"
            key = jwt.PyJWK(jwk)
            with pytest.raises(jwt.exceptions.PyJWTError):
                jwt.decode(token, key, algorithms=["HS256", "RS256", "ES256"])
            with pytest.raises(jwt.exceptions.PyJWTError):
                jwt.decode(token, pem, algorithms=["HS256"])  # PyJWT refuses a PEM as an HMAC secret


# -- metadata -----------------------------------------------------------------------------------------


def test_metadata_urls() -> None:
    assert resource_metadata_url("https://gw.test/mcp") == "https://gw.test/.well-known/oauth-protected-resource/mcp"
    assert resource_metadata_url("https://gw.test") == "https://gw.test/.well-known/oauth-protected-resource"
    assert resource_metadata_url("https://gw.test:8443/t/mcp/") == (
        "https://gw.test:8443/.well-known/oauth-protected-resource/t/mcp"
    )
    assert metadata_urls("https://idp.test") == [
        "https://idp.test/.well-known/oauth-authorization-server",
        "https://idp.test/.well-known/openid-configuration",
    ]
    assert metadata_urls("https://idp.test/realms/a") == [
        "https://idp.test/.well-known/oauth-authorization-server/realms/a",
        "https://idp.test/realms/a/.well-known/openid-configuration",
        "https://idp.test/.well-known/openid-configuration/realms/a",
    ]


def test_protected_resource_metadata_document() -> None:
    config = OAuthConfig.model_validate(
        {
            "resource": "https://gw.test/mcp",
            "resource_name": "gw",
            "issuers": [{"issuer": "https://a.test"}, {"issuer": "https://b.test/realm"}],
            "roles": {"required_scopes": ["mcp"], "operator_scopes": ["mcp:admin"]},
        }
    )
    assert protected_resource_metadata(config) == {
        "resource": "https://gw.test/mcp",
        "authorization_servers": ["https://a.test", "https://b.test/realm"],
        "bearer_methods_supported": ["header"],
        "scopes_supported": ["mcp", "mcp:admin"],
        "resource_name": "gw",
    }
