"""The gateway itself as an OAuth 2.1 resource server (issue 14, ADR 0011 "Wiring"): a real
``serve_http`` with an ``oauth:`` section trusting the local authorization server
(``tests/support/authz_server.py``: keys generated per run, metadata, JWKS, rotation, an
auto-approving authorize endpoint), everything over real HTTP on 127.0.0.1.

- access tokens on ``/mcp`` beside session tokens, both eras; the principal is the subject,
  the grant set the claim rules' (``grants``);
- every refusal: the right status, ``WWW-Authenticate`` naming the RFC 9728 metadata, an
  ``error`` and ``error_description``; nothing of a token in a body or a log line;
- key rotation (unknown ``kid``), the JWKS endpoint down (stale keys within their bound, then
  fail closed with 503);
- ``/v1``: operator by scope, owner otherwise, static tokens unchanged;
- a legacy MCP session stays with the subject that opened it;
- no token passthrough, checked on the upstream's side;
- the official SDK's OAuth client discovering everything from the 401 and logging in.

The gateway's ``resource`` is its own ``/mcp`` URL, which the SDK's client checks against the URL
it connects to, so its socket is bound (port 0) before the config is written (:func:`oauth_gateway`)."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
import pytest
from cryptography.hazmat.primitives import serialization
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientMetadata

from mcp_reconciler.api.server import Served, serve_http
from mcp_reconciler.reconciler.authority import oauth_principal_id
from tests.api.conftest import (
    OPERATOR_TOKEN,
    WAIT,
    authenticator,
    backdate,
    mcp_client,
    refused,
    tool_names,
    upstream_source,
)
from tests.api.test_cli import _serve_output
from tests.api.test_oauth_http import AutoBrowser, MemoryStorage, challenge_params
from tests.support.authz_server import AuthorizationServer, authz_server, forge_hs256, unsigned
from tests.support.ports import listening_socket
from tests.support.protected_mcp import protected_mcp_server
from tests.support.raw_mcp import ACCEPT, LEGACY, MODERN, legacy_open, legacy_request, rpc
from tests.support.raw_mcp import tool_names as raw_tool_names

pytestmark = pytest.mark.anyio

ERAS = ("legacy", "auto")
MODERN_HEADER = {"mcp-protocol-version": MODERN, "mcp-method": "tools/list"}  # a sessionless 2026-07-28 request
MODERN_LIST = rpc(
    "tools/list",
    {"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}},
)
UPSTREAM_SECRET = "gw-upstream-s3cret-9f2e"


def gateway_config(
    tmp: Path, port: int, az: AuthorizationServer, sources: Sequence[dict[str, Any]], **oauth: Any
) -> Path:
    resource = f"http://127.0.0.1:{port}/mcp"
    section: dict[str, Any] = {
        "resource": resource,
        "issuers": [{"issuer": az.issuer}],
        "roles": {"required_scopes": ["mcp"], "operator_scopes": ["mcp:admin"]},
        **oauth,
    }
    cfg = tmp / "gateway.yaml"
    cfg.write_text(json.dumps({"gateway": {"cooldown_s": 0.05}, "sources": list(sources), "oauth": section}))
    backdate(cfg)
    return cfg


@contextlib.asynccontextmanager
async def oauth_gateway(
    tmp: Path, az: AuthorizationServer, *, sources: Sequence[dict[str, Any]] | None = None, **oauth: Any
) -> AsyncIterator[Served]:
    """The gateway with an ``oauth:`` section whose ``resource`` is its own ``/mcp`` URL: its
    socket is bound (port 0) before the config names the port, and handed to the gateway."""
    sources = [upstream_source("up", "a", "b")] if sources is None else sources
    async with contextlib.AsyncExitStack() as stack:
        sock = listening_socket()
        cfg = gateway_config(tmp, sock.getsockname()[1], az, sources, **oauth)
        served = await stack.enter_async_context(
            serve_http(cfg, watch_interval_s=0.1, authenticator=authenticator(), listen_socket=sock)
        )
        az.audience = served.url  # tokens minted by hand are for this gateway unless a test says otherwise
        yield served


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def metadata_url(served: Served) -> str:
    return served.base_url + "/.well-known/oauth-protected-resource/mcp"


def owners(served: Served) -> set[str]:
    return {s.owner for s in served.gateway.engine.sessions.sessions()}


# -- valid tokens, both eras ----------------------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_an_access_token_opens_a_session_of_its_subject_with_the_claimed_grants(
    mode: str, tmp_path: Path
) -> None:
    async with (
        authz_server() as az,
        oauth_gateway(tmp_path, az, grants={"policy": "explicit", "scope_prefix": "tool:"}) as served,
    ):
        alice = az.mint("alice", scope="mcp tool:up__a")
        with anyio.fail_after(WAIT):
            async with mcp_client(served, mode=mode, headers=bearer(alice)) as mcp:
                assert await tool_names(mcp) == {"up__a"}  # exactly the names its scopes grant
                result = await mcp.call_tool("up__a", {})
                assert not result.is_error
                assert owners(served) == {f"oauth:{az.issuer}:alice"}
                # A session token keeps working beside access tokens (both schemes at once).
                async with mcp_client(served, mode=mode) as other:
                    assert await tool_names(other) >= {"up__a", "up__b"}
        assert az.jwks_fetches == 1


# -- every refusal, with its challenge -------------------------------------------------------------


async def test_refusals_carry_the_challenge_and_echo_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with authz_server() as az, oauth_gateway(tmp_path, az) as served:
        now = int(time.time())
        forged = {"iss": az.issuer, "aud": served.url, "sub": "mallory", "scope": "mcp", "exp": now + 300}
        public_pem = az.signing.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        unpublished = az.new_key(publish=False)
        cases: list[tuple[str, str | None, int, str | None, str]] = [
            ("no credential", None, 401, None, ""),
            ("expired", az.mint(scope="mcp", exp_in=-300), 401, "invalid_token", "the access token expired"),
            ("not yet valid", az.mint(scope="mcp", nbf_in=300), 401, "invalid_token", "not valid yet"),
            ("wrong aud", az.mint(scope="mcp", aud="http://127.0.0.1:1/mcp"), 401, "invalid_token", "not issued for"),
            ("wrong iss", az.mint(scope="mcp", iss="https://evil.test"), 401, "invalid_token", "issuer is not trusted"),
            ("alg none", unsigned(forged), 401, "invalid_token", "signing algorithm is not accepted"),
            (
                "HS256 with the public key",
                forge_hs256(forged, public_pem, kid=az.signing.kid),
                401,
                "invalid_token",
                "signing algorithm",
            ),
            ("bad signature", az.mint(scope="mcp")[:-6] + "AAAAAA", 401, "invalid_token", "signature is invalid"),
            ("unknown kid", az.mint(scope="mcp", key=unpublished), 401, "invalid_token", "unknown key"),
            ("missing scope", az.mint(scope="profile"), 403, "insufficient_scope", "lacks a required scope"),
            ("not a token", "not-a-session-token", 401, "invalid_token", "not valid"),
        ]
        tokens = [token for _, token, *_ in cases if token is not None]
        async with httpx2.AsyncClient() as http:
            init = rpc("initialize", {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "x"}})
            for what, token, status, error, description in cases:
                for body, era_headers in ((init, {}), (MODERN_LIST, MODERN_HEADER)):
                    headers = {**ACCEPT, **era_headers, **(bearer(token) if token is not None else {})}
                    r = await http.post(served.url, json=body, headers=headers)
                    assert r.status_code == status, (what, r.text)
                    params = challenge_params(r.headers["www-authenticate"])
                    assert params["resource_metadata"] == metadata_url(served), what
                    assert params["scope"] == "mcp", what
                    assert params.get("error") == error, what
                    assert description in params.get("error_description", ""), what
                    assert set(r.json()) == {"error", "error_description"}, what
                    for t in tokens:
                        assert t[:20] not in r.text and t[-20:] not in r.text, what
        for mode in ERAS:  # the SDK's client gets nowhere with a refused token either
            await refused(served, mode, bearer(az.mint(scope="mcp", exp_in=-300)))
        assert owners(served) == set() and not served.front.bindings
    logged = "\n".join(f"{r.getMessage()} {r.args!r}" for r in caplog.records)
    assert "access token refused: expired" in logged  # the reason is logged ...
    for t in tokens:  # ... and nothing of any token
        assert t[:20] not in logged and t[-20:] not in logged


async def test_metadata_routes(tmp_path: Path) -> None:
    async with authz_server() as az, oauth_gateway(tmp_path, az) as served:
        async with httpx2.AsyncClient() as http:
            for path in ("/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"):
                r = await http.get(served.base_url + path)
                assert r.status_code == 200, path
                assert r.json() == {
                    "resource": served.url,
                    "authorization_servers": [az.issuer],
                    "bearer_methods_supported": ["header"],
                    "scopes_supported": ["mcp", "mcp:admin"],
                }


# -- keys: rotation, outage -----------------------------------------------------------------------


async def test_unknown_kid_then_rotation(tmp_path: Path) -> None:
    jwks = {"min_refetch_interval_s": 0}
    async with authz_server() as az, oauth_gateway(tmp_path, az, jwks=jwks) as served, httpx2.AsyncClient() as http:

        async def status(token: str) -> int:
            r = await http.post(served.url, json=MODERN_LIST, headers={**ACCEPT, **MODERN_HEADER, **bearer(token)})
            return r.status_code

        assert await status(az.mint("alice", scope="mcp")) == 200
        assert az.jwks_fetches == 1
        # A kid the issuer does not publish: one refetch, still unknown → refused.
        assert await status(az.mint("alice", scope="mcp", key=az.new_key(publish=False))) == 401
        assert az.jwks_fetches == 2
        # The issuer rotates: a token signed with the new key triggers a refetch and is accepted;
        # the old key (still published) keeps working without another fetch.
        old = az.signing
        az.rotate("ES256")
        assert await status(az.mint("bob", scope="mcp")) == 200
        assert az.jwks_fetches == 3
        assert await status(az.mint("carol", scope="mcp", key=old)) == 200
        assert az.jwks_fetches == 3


async def test_jwks_down_stale_keys_work_within_their_bound_then_fail_closed(tmp_path: Path) -> None:
    # Real time, small bounds: keys are refreshed after 0.2 s, usable up to 3 s after their fetch.
    jwks = {"refresh_interval_s": 0.2, "max_stale_s": 3, "min_refetch_interval_s": 0.2}
    async with authz_server() as az, oauth_gateway(tmp_path, az, jwks=jwks) as served, httpx2.AsyncClient() as http:

        async def call(token: str) -> httpx2.Response:
            return await http.post(served.url, json=MODERN_LIST, headers={**ACCEPT, **MODERN_HEADER, **bearer(token)})

        fetched_at = time.monotonic()
        cached = az.mint("cached", scope="mcp")
        assert (await call(cached)).status_code == 200
        az.jwks_down = True
        with anyio.fail_after(WAIT):
            # Fresh tokens (never cached) until one of them made the gateway try the JWKS again
            # and fail: still accepted with the stale keys.
            while az.jwks_fetches < 2:
                r = await call(az.mint("alice", scope="mcp"))
                assert r.status_code == 200 or time.monotonic() - fetched_at > 3, r.text
                await anyio.sleep(0.05)  # the stale window is a time (max_stale_s): its passage is the subject
            assert time.monotonic() - fetched_at < 3, "the box was too slow to observe the stale window"
            assert (await call(az.mint("alice", scope="mcp"))).status_code == 200
            # Beyond max_stale_s: fail closed (503, retry later), not "valid" and not "invalid".
            while (r := await call(az.mint("alice", scope="mcp"))).status_code == 200:
                await anyio.sleep(0.1)  # until max_stale_s has passed (the subject), one probe per period
        assert time.monotonic() - fetched_at >= 3
        assert r.status_code == 503 and r.headers["retry-after"] == "5", r.text
        assert r.json()["error"] == "temporarily_unavailable"
        attempts = az.jwks_fetches
        assert attempts <= 2 + (time.monotonic() - fetched_at) / 0.2  # at most one per min_refetch_interval_s
        assert (await call(cached)).status_code == 200  # validated before the outage: cached until its ttl
        # The issuer is back: the next token refetches and is accepted.
        az.jwks_down = False
        with anyio.fail_after(WAIT):
            while (await call(az.mint("alice", scope="mcp"))).status_code != 200:
                await anyio.sleep(0.1)  # refetches are paced by min_refetch_interval_s (a time, the subject)


# -- /v1 ------------------------------------------------------------------------------------------


async def test_v1_operator_by_scope_owner_otherwise_static_tokens_unchanged(tmp_path: Path) -> None:
    async with authz_server() as az, oauth_gateway(tmp_path, az) as served, httpx2.AsyncClient() as http:
        v1 = served.base_url + "/v1"
        operator = bearer(az.mint("root", scope="mcp mcp:admin"))
        bob = bearer(az.mint("bob", scope="mcp"))
        eve = bearer(az.mint("eve", scope="mcp"))

        # Operator by scope: administration and the full status.
        r = await http.post(v1 + "/refresh", json={"wait": True}, headers=operator)
        assert r.status_code == 200, r.text

        # Owner otherwise: no administration (the handler's 403), its own sessions only.
        r = await http.post(v1 + "/refresh", json={}, headers=bob)
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
        assert (await http.get(v1 + "/status", headers=bob)).status_code == 200
        created = await http.post(v1 + "/sessions", json={"grant_policy": "explicit", "names": ["up__a"]}, headers=bob)
        assert created.status_code == 201, created.text
        session = created.json()
        assert session["owner"] == f"oauth:{az.issuer}:bob"
        listed = (await http.get(v1 + "/sessions", headers=bob)).json()["sessions"]
        assert [s["id"] for s in listed] == [session["id"]]
        assert (await http.get(v1 + "/sessions", headers=eve)).json()["sessions"] == []
        everyone = (await http.get(v1 + "/sessions", headers=operator)).json()["sessions"]
        assert session["id"] in [s["id"] for s in everyone]  # the operator sees every owner's
        assert (await http.get(v1 + f"/sessions/{session['id']}", headers=eve)).status_code == 404
        # A fresh token of the same subject is the same owner.
        bob_again = bearer(az.mint("bob", scope="mcp"))
        assert (await http.get(v1 + f"/sessions/{session['id']}", headers=bob_again)).status_code == 200
        # The session it created works on /mcp with its own token.
        async with mcp_client(served, headers=bearer(session["token"])) as mcp:
            assert await tool_names(mcp) == {"up__a"}

        # Refused tokens: the /v1 error shape plus the challenge.
        for token, status, error in (
            (az.mint("bob", scope="mcp", exp_in=-300), 401, "invalid_token"),
            (az.mint("bob", scope="mcp", aud="http://127.0.0.1:1/mcp"), 401, "invalid_token"),
            (az.mint("bob", scope="profile"), 403, "insufficient_scope"),
        ):
            r = await http.get(v1 + "/status", headers=bearer(token))
            assert r.status_code == status, r.text
            assert set(r.json()) == {"error"} and r.json()["error"]["message"]
            params = challenge_params(r.headers["www-authenticate"])
            assert params["error"] == error and params["resource_metadata"] == metadata_url(served)
            assert token[-20:] not in r.text

        # Static tokens keep working; anything else is the handlers' 401 as before.
        assert (
            await http.post(v1 + "/refresh", json={"wait": True}, headers=bearer(OPERATOR_TOKEN))
        ).status_code == 200
        r = await http.get(v1 + "/status", headers=bearer("not-a-token"))
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"
        assert (await http.get(v1 + "/status")).status_code == 401


# -- legacy sessions stay with their subject -------------------------------------------------------


async def test_one_subject_cannot_use_another_subjects_legacy_session(tmp_path: Path) -> None:
    async with authz_server() as az, oauth_gateway(tmp_path, az) as served, httpx2.AsyncClient() as http:
        alice = bearer(az.mint("alice", scope="mcp"))
        opened = await legacy_open(http, served.url, alice)
        assert opened.status_code == 200, opened.text
        sid = opened.headers["mcp-session-id"]
        assert raw_tool_names(await legacy_request(http, served.url, sid, "tools/list", headers=alice)) >= {
            "up__a",
            "up__b",
        }
        # Another subject (even an operator), the same subject at another issuer's namespace (a
        # session token), no credential: to them that session does not exist.
        other = served.gateway.engine.sessions.create("owner::alice", None)
        for headers, status in (
            (bearer(az.mint("bob", scope="mcp mcp:admin")), 404),
            (bearer(other.token), 404),
            ({}, 401),
        ):
            r = await legacy_request(http, served.url, sid, "tools/list", headers=headers)
            assert r.status_code == status and "up__a" not in r.text, (headers, r.text)
        # A refreshed token of the same subject and client keeps the session; another client
        # application's token of the same user is another principal (issue 30): 404.
        again = bearer(az.mint("alice", scope="mcp"))
        listed = await legacy_request(http, served.url, sid, "tools/list", headers=again)
        assert raw_tool_names(listed) >= {"up__a", "up__b"}
        other_app = bearer(az.mint("alice", scope="mcp", claims={"client_id": "other-app"}))
        r = await legacy_request(http, served.url, sid, "tools/list", headers=other_app)
        assert r.status_code == 404 and "up__a" not in r.text
        assert owners(served) == {f"oauth:{az.issuer}:alice", "owner::alice"}
        await http.delete(served.url, headers={**alice, "mcp-session-id": sid})


# -- no token passthrough -------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_the_upstream_never_receives_the_clients_token(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with authz_server() as az, protected_mcp_server(az, tools=("echo",)) as upstream:
        az.add_client("gateway", UPSTREAM_SECRET)
        monkeypatch.setenv("GW_UPSTREAM_SECRET", UPSTREAM_SECRET)
        source = {
            "name": "prot",
            "http": {
                "url": upstream.url,
                "oauth": {
                    "token_url": az.token_url,
                    "client_id": "gateway",
                    "client_secret": "${GW_UPSTREAM_SECRET}",
                    "scopes": ["mcp"],
                    "resource": upstream.url,
                },
            },
        }
        async with oauth_gateway(tmp_path, az, sources=[source]) as served:
            client_token = az.mint("alice", scope="mcp")
            with anyio.fail_after(WAIT):
                async with mcp_client(served, mode=mode, headers=bearer(client_token)) as mcp:
                    assert await tool_names(mcp) == {"prot__echo"}
                    assert not (await mcp.call_tool("prot__echo", {"x": "hi"})).is_error
        assert upstream.server.calls == [("echo", {"x": "hi"})]
        (gateway_token,) = az.issued  # the one token /token handed out: the gateway's own
        assert upstream.authorizations and all(a == f"Bearer {gateway_token}" for a in upstream.authorizations)
        assert all(client_token not in (a or "") for a in upstream.authorizations)
        assert {i.subject for i in upstream.identities} == {"gateway"}


# -- a client that only knows the MCP specification ------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_the_official_sdk_oauth_client_logs_in_through_the_401(
    mode: Literal["legacy", "auto"], tmp_path: Path
) -> None:
    async with authz_server() as az, oauth_gateway(tmp_path, az) as served:
        browser = AutoBrowser()
        storage = MemoryStorage()
        provider = OAuthClientProvider(
            server_url=served.url,
            client_metadata=OAuthClientMetadata(
                client_name="spec-only client",
                redirect_uris=["http://127.0.0.1:1/callback"],  # never contacted: AutoBrowser reads the redirect
                grant_types=["authorization_code", "refresh_token"],
                response_types=["code"],
                token_endpoint_auth_method="none",
            ),
            storage=storage,
            redirect_handler=browser.redirect,
            callback_handler=browser.callback,
        )
        with anyio.fail_after(WAIT):
            async with httpx2.AsyncClient(auth=provider, timeout=10) as http:
                async with Client(streamable_http_client(served.url, http_client=http), mode=mode) as client:
                    assert await tool_names(client) >= {"up__a", "up__b"}
                    assert not (await client.call_tool("up__a", {})).is_error
                    assert storage.client is not None  # the principal is (issuer, subject, client id)
                    assert owners(served) == {oauth_principal_id(az.issuer, "alice", storage.client.client_id or "")}
        # Discovered from the 401: registered itself, authorization code + PKCE for this resource
        # with the challenged scope; one login, one token.
        (visit,) = browser.visits
        authorize = parse_qs(urlsplit(visit).query)
        assert authorize["code_challenge_method"] == ["S256"] and authorize["resource"] == [served.url]
        assert authorize["scope"] == ["mcp"]
        assert az.token_requests["authorization_code"] == 1 and len(az.issued) == 1
        assert storage.tokens is not None and storage.tokens.access_token == az.issued[0]
        assert storage.client is not None and storage.client.client_id in az.clients


# -- serve says so ---------------------------------------------------------------------------------


async def test_serve_names_the_metadata_url_at_startup(tmp_path: Path) -> None:
    # The issuer need not be reachable at startup: its keys are fetched by the first validation.
    cfg = gateway_config(tmp_path, 8765, AuthorizationServer(1), [upstream_source("up", "a")])
    out = await _serve_output(cfg)
    assert (
        "/mcp and /v1 accept access tokens; metadata: http://127.0.0.1:8765/.well-known/oauth-protected-resource/mcp"
        in out
    )
