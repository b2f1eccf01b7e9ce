"""The resource server's token validation against a real authorization server on loopback
(``tests/support/authz_server.py``): signatures against its JWKS fetched over HTTP, issuer,
audience (RFC 8707), times, algorithms, key rotation, JWKS outages within and beyond their
bound, fetch counts under load, scopes → roles, the token cache, and RFC 7662 introspection.

Key freshness runs on an injected monotonic clock (advanced by the test, never slept on);
token times are real (tokens are minted expired or not yet valid)."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from cryptography.hazmat.primitives import serialization

from mcp_reconciler.api.auth import Authenticator
from mcp_reconciler.api.oauth import AuthFailure, ResourceServer
from mcp_reconciler.api.oauth.identity import PrincipalId
from mcp_reconciler.reconciler.oauth_config import OAuthConfig
from tests.support.authz_server import AuthorizationServer, authz_server, forge_hs256, unsigned

pytestmark = pytest.mark.anyio

RESOURCE = "https://gateway.test/mcp"
WAIT = 20.0


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 10_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def config(az: AuthorizationServer, **over: Any) -> OAuthConfig:
    issuer: dict[str, Any] = {"issuer": az.issuer, **over.pop("issuer", {})}
    raw: dict[str, Any] = {
        "resource": RESOURCE,
        "issuers": [issuer, *over.pop("more_issuers", [])],
        "roles": {"required_scopes": ["mcp"], "operator_scopes": ["mcp:admin"]},
        "jwks": {"refresh_interval_s": 300, "max_stale_s": 900, "min_refetch_interval_s": 30},
        **over,
    }
    return OAuthConfig.model_validate(raw)


@asynccontextmanager
async def resource_server(
    az: AuthorizationServer, clock: Clock | None = None, static: Authenticator | None = None, **over: Any
) -> AsyncIterator[ResourceServer]:
    async with ResourceServer(config(az, **over), static, clock=clock or Clock()) as rs:
        yield rs


def bearer(token: str) -> str:
    return f"Bearer {token}"


async def refused(rs: ResourceServer, token: str) -> AuthFailure:
    with pytest.raises(AuthFailure) as exc:
        await rs.authenticate(bearer(token))
    return exc.value


def keys(rs: ResourceServer, az: AuthorizationServer) -> Any:
    assert rs.validator is not None
    return rs.validator.issuers[az.issuer]


# -- the happy path -------------------------------------------------------------------------------


async def test_valid_token_gives_a_namespaced_identity_and_is_cached() -> None:
    async with authz_server(audience=RESOURCE) as az, resource_server(az) as rs:
        others = {alg: az.new_key(alg) for alg in ("ES256", "EdDSA", "PS256")}  # published up front
        token = az.mint("alice", scope="mcp tools:read", claims={"client_id": "agent-7"})
        identity = await rs.authenticate(bearer(token))
        assert identity.principal == PrincipalId("oauth", az.issuer, "alice", "agent-7")  # (iss, sub, client)
        assert identity.scheme == "jwt" and identity.roles == {"owner"} and not identity.is_operator
        assert identity.scopes == {"mcp", "tools:read"} and identity.client_id == "agent-7"
        assert identity.expires_at is not None
        assert az.metadata_fetches == 1 and az.jwks_fetches == 1  # discovered, then fetched once
        # Hot path: the same token again is a cache hit, with no fetch and no validation.
        assert rs.cached(bearer(token)) is identity
        assert await rs.authenticate(bearer(token)) is identity
        assert az.jwks_fetches == 1
        # Every algorithm family on the default allow-list.
        for key in others.values():
            other = await rs.authenticate(bearer(az.mint("bob", scope="mcp", key=key)))
            assert other.subject == "bob"


async def test_expired_and_not_yet_valid_tokens_are_refused_with_leeway() -> None:
    async with authz_server(audience=RESOURCE) as az, resource_server(az) as rs:
        failure = await refused(rs, az.mint(scope="mcp", exp_in=-120))
        assert (failure.reason, failure.status, failure.error) == ("expired", 401, "invalid_token")
        await rs.authenticate(bearer(az.mint(scope="mcp", exp_in=-5)))  # within leeway (30 s)
        failure = await refused(rs, az.mint(scope="mcp", nbf_in=300))
        assert (failure.reason, failure.status) == ("not_yet_valid", 401)
        await rs.authenticate(bearer(az.mint(scope="mcp", nbf_in=5)))
        assert (await refused(rs, az.mint(scope="mcp", exp_in=None))).reason == "claims"  # exp is required


async def test_audience_must_name_this_resource() -> None:
    async with authz_server(audience=RESOURCE) as az, resource_server(az) as rs:
        for aud in ("https://other.test/mcp", "https://gateway.test/mcp/", ["https://a.test", "https://b.test"]):
            failure = await refused(rs, az.mint(scope="mcp", aud=aud))
            assert failure.reason == "audience", aud
        assert (await refused(rs, az.mint(scope="mcp", claims={"aud": None}))).reason in ("audience", "claims")
        await rs.authenticate(bearer(az.mint(scope="mcp", aud=["https://other.test", RESOURCE])))


async def test_wrong_issuer_is_refused_without_fetching() -> None:
    async with authz_server(audience=RESOURCE) as az, authz_server(audience=RESOURCE) as other:
        async with resource_server(az) as rs:
            # A real token from an issuer we do not trust.
            assert (await refused(rs, other.mint(scope="mcp"))).reason == "issuer"
            assert other.metadata_fetches == 0 and other.jwks_fetches == 0
            # Claiming our issuer, signed by the other server's key: not one of our keys.
            forged = other.mint(scope="mcp", iss=az.issuer)
            assert (await refused(rs, forged)).reason == "unknown_key"
            # Same, with a kid that our issuer does publish: the signature cannot verify.
            forged = other.mint(scope="mcp", iss=az.issuer, kid=az.signing.kid)
            assert (await refused(rs, forged)).reason == "signature"


async def test_alg_none_and_hs256_signed_with_the_public_key_are_refused() -> None:
    async with authz_server(audience=RESOURCE) as az, resource_server(az) as rs:
        # A symmetric key smuggled into the JWKS under its own kid.
        az.extra_jwks.append({"kty": "oct", "kid": "sym", "k": "c2VjcmV0", "alg": "HS256"})
        await rs.authenticate(bearer(az.mint(scope="mcp")))
        assert keys(rs, az).current is not None and "sym" not in keys(rs, az).current.by_kid
        claims = json.loads(base64.urlsafe_b64decode(az.mint(scope="mcp").split(".")[1] + "==").decode())
        assert (await refused(rs, unsigned(claims))).reason == "algorithm"
        pem = az.signing.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        for secret in (pem, json.dumps(az.signing.jwk).encode(), az.signing.jwk["n"].encode()):
            failure = await refused(rs, forge_hs256(claims, secret, kid=az.signing.kid))
            assert (failure.reason, failure.status) == ("algorithm", 401)
        assert (await refused(rs, forge_hs256(claims, b"secret", kid="sym"))).reason == "algorithm"


async def test_token_types_and_malformed_tokens() -> None:
    async with authz_server(audience=RESOURCE) as az, resource_server(az) as rs:
        await rs.authenticate(bearer(az.mint(scope="mcp", typ="JWT")))
        await rs.authenticate(bearer(az.mint(scope="mcp", typ=None)))
        assert (await refused(rs, az.mint(scope="mcp", typ="dpop+jwt"))).reason == "unsupported_token"
        for junk in ("a.b.c", "not-a-jwt", "x" * 20_000, "a.b.c.d.e"):
            failure = await refused(rs, junk)
            assert failure.status == 401 and failure.error == "invalid_token", junk
        assert (await refused(rs, az.mint(sub=None, scope="mcp"))).reason == "claims"  # no sub, no client_id
    async with authz_server(audience=RESOURCE) as az, resource_server(az, require_at_jwt=True) as rs:
        await rs.authenticate(bearer(az.mint(scope="mcp", typ="at+jwt")))
        assert (await refused(rs, az.mint(scope="mcp", typ="JWT"))).reason == "unsupported_token"


async def test_client_credentials_token_without_sub_is_its_client() -> None:
    async with authz_server(audience=RESOURCE) as az, resource_server(az) as rs:
        identity = await rs.authenticate(bearer(az.mint(sub=None, scope="mcp", claims={"azp": "svc-1"})))
        assert identity.principal == PrincipalId("oauth", az.issuer, "svc-1", "svc-1")


# -- keys: rotation, outages, bounds ------------------------------------------------------------------


async def test_unknown_kid_refetches_once_per_interval_then_rotation_works() -> None:
    clock = Clock()
    async with authz_server(audience=RESOURCE) as az, resource_server(az, clock) as rs:
        await rs.authenticate(bearer(az.mint(scope="mcp")))
        assert az.jwks_fetches == 1
        old = az.signing
        az.rotate("ES256")  # published and signing from now on
        clock.advance(31)  # the first fetch counts against min_refetch_interval_s too
        identity = await rs.authenticate(bearer(az.mint("carol", scope="mcp")))
        assert identity.subject == "carol" and az.jwks_fetches == 2  # the unknown kid refetched once
        # Another unknown kid right away: no second fetch within min_refetch_interval_s.
        stray = az.new_key("RS256", publish=False)
        assert (await refused(rs, az.mint(scope="mcp", key=stray))).reason == "unknown_key"
        assert az.jwks_fetches == 2
        # Published later, seen after the interval.
        az.published.append(stray)
        clock.advance(31)
        await rs.authenticate(bearer(az.mint("dave", scope="mcp", key=stray)))
        assert az.jwks_fetches == 3
        # A retired key stops working once the set is refreshed.
        az.retire(old)
        clock.advance(301)
        assert (await refused(rs, az.mint("erin", scope="mcp", key=old))).reason == "unknown_key"


async def test_jwks_down_cached_keys_work_within_their_bound_then_fail_closed() -> None:
    clock = Clock()
    async with authz_server(audience=RESOURCE) as az, resource_server(az, clock) as rs:
        await rs.authenticate(bearer(az.mint(scope="mcp")))
        az.jwks_down = True
        clock.advance(301)  # stale: the next cold validation tries to refetch, and fails
        await rs.authenticate(bearer(az.mint("bob", scope="mcp")))
        assert az.jwks_fetches == 2
        clock.advance(10)  # a failed attempt is not retried within min_refetch_interval_s
        await rs.authenticate(bearer(az.mint("carol", scope="mcp")))
        assert az.jwks_fetches == 2
        clock.advance(900 - 311 + 1)  # past max_stale_s: cached keys are no longer trusted
        failure = await refused(rs, az.mint("dave", scope="mcp"))
        assert (failure.reason, failure.status, failure.error) == ("keys_unavailable", 503, "temporarily_unavailable")
        assert failure.headers(rs.resource_metadata_url) == {"Retry-After": "5"}
        assert az.jwks_fetches == 3
        # Tokens validated before stay cached (their signature was checked with trusted keys).
        az.jwks_down = False
        clock.advance(31)
        assert (await rs.authenticate(bearer(az.mint("erin", scope="mcp")))).subject == "erin"
        assert az.jwks_fetches == 4


async def test_jwks_unreachable_from_the_start_fails_closed() -> None:
    async with authz_server(audience=RESOURCE) as az:
        az.jwks_down = True
        async with resource_server(az) as rs:
            assert (await refused(rs, az.mint(scope="mcp"))).reason == "keys_unavailable"


async def test_jwks_fetched_at_most_once_per_refresh_interval_under_load() -> None:
    clock = Clock()
    async with authz_server(audience=RESOURCE) as az, resource_server(az, clock) as rs:
        tokens = [az.mint(f"user{i}", scope="mcp") for i in range(100)]
        results: list[str] = []

        async def validate(token: str) -> None:
            results.append((await rs.authenticate(bearer(token))).subject)

        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                for token in tokens:
                    tg.start_soon(validate, token)
        assert len(results) == 100
        assert az.jwks_fetches == 1 and az.metadata_fetches == 1
        clock.advance(301)
        fresh = [az.mint(f"later{i}", scope="mcp") for i in range(100)]
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                for token in fresh:
                    tg.start_soon(validate, token)
        assert az.jwks_fetches == 2 and az.metadata_fetches == 1
        # 50 tokens naming keys nobody published: one refetch for all of them.
        clock.advance(31)
        strays = [az.mint(scope="mcp", kid=f"made-up-{i}") for i in range(50)]
        failures: list[str] = []

        async def refuse(token: str) -> None:
            with pytest.raises(AuthFailure) as exc:
                await rs.authenticate(bearer(token))
            failures.append(exc.value.reason)

        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                for token in strays:
                    tg.start_soon(refuse, token)
        assert failures == ["unknown_key"] * 50
        assert az.jwks_fetches == 3


async def test_validations_arriving_during_a_fetch_join_it() -> None:
    """Requests that arrive while a JWKS fetch is in flight wait for it, neither failing (the
    refetch rate limit is not a reason to refuse) nor fetching again — at start and on rotation."""
    clock = Clock()
    async with authz_server(audience=RESOURCE) as az, resource_server(az, clock) as rs:
        issuer_keys = keys(rs, az)
        outcomes: list[str] = []

        async def validate(token: str) -> None:
            try:
                outcomes.append((await rs.authenticate(bearer(token))).subject)
            except AuthFailure as failure:
                outcomes.append(failure.reason)

        async def burst(tokens: list[str]) -> None:
            az.jwks_requested = anyio.Event()
            az.jwks_gate = anyio.Event()
            outcomes.clear()
            with anyio.fail_after(WAIT):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(validate, tokens[0])
                    await az.jwks_requested.wait()  # the first one is fetching, held by the gate
                    for token in tokens[1:]:
                        tg.start_soon(validate, token)
                    while issuer_keys._lock.statistics().tasks_waiting + len(outcomes) < len(tokens) - 1:
                        await anyio.sleep(0.005)  # the others reached the fetch (or gave up)
                    az.jwks_gate.set()

        await burst([az.mint(f"u{i}", scope="mcp") for i in range(20)])
        assert sorted(outcomes) == sorted(f"u{i}" for i in range(20))
        assert az.jwks_fetches == 1
        az.rotate("ES256")
        clock.advance(31)
        await burst([az.mint(f"r{i}", scope="mcp") for i in range(20)])
        assert sorted(outcomes) == sorted(f"r{i}" for i in range(20))
        assert az.jwks_fetches == 2


@pytest.mark.parametrize("extra", [0, 1])
async def test_jwks_max_keys_at_n_and_n_plus_1(extra: int) -> None:
    async with authz_server(audience=RESOURCE) as az:
        limit = 4
        for _ in range(limit - 1 + extra):
            az.new_key("ES256")
        assert len(az.published) == limit + extra
        async with resource_server(az, jwks={"max_keys": limit}) as rs:
            token = az.mint(scope="mcp")
            if extra:
                assert (await refused(rs, token)).reason == "keys_unavailable"
            else:
                await rs.authenticate(bearer(token))


async def test_jwks_max_bytes_and_unusable_keys() -> None:
    async with authz_server(audience=RESOURCE) as az:
        az.extra_jwks.append({"kty": "RSA", "kid": "pad", "n": "A" * 2000, "e": "AQAB", "use": "enc"})
        async with resource_server(az, jwks={"max_bytes": 1024}) as rs:
            assert (await refused(rs, az.mint(scope="mcp"))).reason == "keys_unavailable"
        async with resource_server(az) as rs:
            await rs.authenticate(bearer(az.mint(scope="mcp")))
            assert "pad" not in keys(rs, az).current.by_kid  # an encryption key is not a signing key


async def test_token_without_kid_tries_the_issuers_keys_of_its_algorithm() -> None:
    async with authz_server(audience=RESOURCE) as az, resource_server(az) as rs:
        az.new_key("ES256")
        assert (await rs.authenticate(bearer(az.mint("nokid", scope="mcp", kid=None)))).subject == "nokid"


async def test_discovery_path_issuer_and_metadata_naming_another_issuer() -> None:
    async with authz_server(audience=RESOURCE, issuer_path="/realms/agents") as az, resource_server(az) as rs:
        assert (await rs.authenticate(bearer(az.mint(scope="mcp")))).principal.issuer.endswith("/realms/agents")
    async with authz_server(audience=RESOURCE) as az, authz_server(audience=RESOURCE) as other:
        # Our issuer, but its configured metadata document vouches for someone else: not used.
        async with resource_server(az, issuer={"metadata_url": other.metadata_url}) as rs:
            assert (await refused(rs, az.mint(scope="mcp"))).reason == "keys_unavailable"
            assert other.jwks_fetches == 0
        async with resource_server(az, issuer={"jwks_url": az.jwks_url}) as rs:  # no discovery at all
            await rs.authenticate(bearer(az.mint(scope="mcp")))
            assert az.metadata_fetches == 0


# -- authority: scopes, roles, challenges -------------------------------------------------------------


async def test_scopes_map_to_roles_and_requirements_give_403() -> None:
    async with authz_server(audience=RESOURCE) as az:
        over = {
            "roles": {
                "required_scopes": ["mcp"],
                "operator_scopes": ["mcp:admin"],
                "operator_claims": {"groups": ["ops"]},
            }
        }
        async with resource_server(az, **over) as rs:
            owner = await rs.require(bearer(az.mint("olga", scope="mcp")), "owner")
            assert owner.roles == {"owner"}
            op = await rs.require(bearer(az.mint("oscar", scope="mcp mcp:admin")), "operator")
            assert op.is_operator
            by_group = await rs.require(
                bearer(az.mint("gina", scope="mcp", claims={"groups": ["dev", "ops"]})), "operator"
            )
            assert by_group.is_operator
            with pytest.raises(AuthFailure) as exc:
                await rs.require(bearer(az.mint("olga", scope="mcp")), "operator")
            assert (exc.value.status, exc.value.error, exc.value.scope) == (
                403,
                "insufficient_scope",
                ("mcp", "mcp:admin"),
            )
            with pytest.raises(AuthFailure) as exc:
                await rs.require(bearer(az.mint("nina", scope="other")), "mcp")
            assert (exc.value.status, exc.value.reason, exc.value.scope) == (403, "scope", ("mcp",))
            header = rs.challenge(exc.value)["WWW-Authenticate"]
            assert header == (
                'Bearer resource_metadata="https://gateway.test/.well-known/oauth-protected-resource/mcp", '
                'scope="mcp", error="insufficient_scope", error_description="the access token lacks a required scope"'
            )


async def test_static_and_jwt_principals_live_in_separate_namespaces() -> None:
    static = Authenticator(["op-token-0123456789"], {"operator1": "owner-token-0123456789"})
    async with authz_server(audience=RESOURCE) as az, resource_server(az, static=static) as rs:
        op = await rs.require(bearer("op-token-0123456789"), "operator")
        owner = await rs.require(bearer("owner-token-0123456789"), "owner")
        jwt_user = await rs.require(bearer(az.mint("operator1", scope="mcp")), "owner")
        assert op.principal == PrincipalId("operator", "", "operator1")
        assert owner.principal == PrincipalId("owner", "", "operator1")
        assert jwt_user.principal == PrincipalId("oauth", az.issuer, "operator1")
        assert len({op.principal, owner.principal, jwt_user.principal}) == 3
        assert op.owner_key != owner.owner_key != jwt_user.owner_key
        with pytest.raises(AuthFailure) as exc:
            await rs.require(bearer("owner-token-0123456789"), "operator")
        assert exc.value.status == 403
        # Static hits are cached too: the second lookup never reaches the Authenticator.
        assert rs.cached(bearer("op-token-0123456789")) is op


async def test_failures_never_echo_the_token() -> None:
    async with authz_server(audience=RESOURCE) as az, resource_server(az) as rs:
        cases = [
            az.mint("secret-subject-xyz", scope="mcp", exp_in=-300),
            az.mint("secret-subject-xyz", scope="mcp", aud="https://evil.test/secret-aud"),
            az.mint("secret-subject-xyz", scope="mcp", iss="https://evil.test/secret-iss"),
            "opaque-secret-token-value",
        ]
        for token in cases:
            failure = await refused(rs, token)
            rendered = json.dumps([failure.body(), rs.challenge(failure), str(failure)])
            for fragment in (token[:20], token[-20:], "secret-subject", "secret-aud", "secret-iss", "evil"):
                assert fragment not in rendered, (fragment, rendered)
        with pytest.raises(AuthFailure) as exc:
            await rs.authenticate(None)
        assert exc.value.status == 401 and exc.value.error is None
        assert rs.challenge(exc.value)["WWW-Authenticate"] == (
            'Bearer resource_metadata="https://gateway.test/.well-known/oauth-protected-resource/mcp", scope="mcp"'
        )


async def test_cached_identity_expires_with_the_token() -> None:
    wall = Clock()
    wall.now = time.time()
    async with authz_server(audience=RESOURCE) as az:
        async with ResourceServer(config(az, token_cache={"ttl_s": 60}), wallclock=wall) as rs:
            short = az.mint(scope="mcp", exp_in=20)
            long = az.mint("bob", scope="mcp", exp_in=3600)
            await rs.authenticate(bearer(short))
            await rs.authenticate(bearer(long))
            assert rs.cached(bearer(short)) is not None and rs.cached(bearer(long)) is not None
            wall.advance(21)  # past the short token's exp: a miss, never a stale hit
            assert rs.cached(bearer(short)) is None
            assert rs.cached(bearer(long)) is not None
            wall.advance(40)  # past the cache TTL: revalidated on next use
            assert rs.cached(bearer(long)) is None


# -- introspection ----------------------------------------------------------------------------------


async def test_opaque_tokens_by_introspection() -> None:
    async with authz_server(audience=RESOURCE) as az:
        az.add_client("gateway-rs", "rs-secret")
        intro = {
            "introspection": {"url": az.introspection_url, "client_id": "gateway-rs", "client_secret": "rs-secret"}
        }
        async with resource_server(az, issuer=intro) as rs:
            token = az.mint_opaque("ivan", scope="mcp mcp:admin")
            identity = await rs.require(bearer(token), "operator")
            assert identity.scheme == "introspection" and identity.principal == PrincipalId(
                "oauth", az.issuer, "ivan", "opaque-client"
            )
            await rs.authenticate(bearer(token))
            assert az.introspections == 1  # cached
            assert (await refused(rs, az.mint_opaque(active=False))).reason == "inactive"
            assert (await refused(rs, az.mint_opaque(aud="https://other.test/mcp"))).reason == "audience"
            assert (await refused(rs, az.mint_opaque(exp_in=-300))).reason == "expired"
            assert (await refused(rs, "never-issued")).reason == "inactive"
        bad = {"introspection": {"url": az.introspection_url, "client_id": "gateway-rs", "client_secret": "wrong"}}
        async with resource_server(az, issuer=bad) as rs:
            failure = await refused(rs, az.mint_opaque())
            assert (failure.reason, failure.status) == ("introspection_unavailable", 503)
    # Without introspection an opaque token is simply invalid.
    async with authz_server(audience=RESOURCE) as az, resource_server(az) as rs:
        assert (await refused(rs, az.mint_opaque())).reason == "invalid"
