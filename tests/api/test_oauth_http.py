"""The resource server at an HTTP edge: RFC 9728 metadata routes, the 401/403 challenges a
``BearerGuard`` answers with, and a client that only knows the MCP specification — the official
Python SDK's OAuth client (``mcp.client.auth.OAuthClientProvider``) — discovering the metadata
from the 401 and completing authorization code + PKCE with dynamic client registration against
the local authorization server, then calling a tool, in both protocol eras.

The protected MCP server is ``tests/support/protected_mcp.py`` (the gateway's own guard in front
of an SDK server), because ``/mcp`` of the gateway itself is wired to this after issue 10."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.auth import OAuthClientProvider, TokenStorage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from tests.support.authz_server import authz_server
from tests.support.protected_mcp import protected_mcp_server

pytestmark = pytest.mark.anyio

WAIT = 30.0
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def challenge_params(header: str) -> dict[str, str]:
    assert header.startswith("Bearer ")
    out: dict[str, str] = {}
    for part in header[7:].split('", '):
        key, _, value = part.partition("=")
        out[key.strip()] = value.strip().strip('"')
    return out


async def test_metadata_routes_serve_rfc9728_documents() -> None:
    async with authz_server() as az, protected_mcp_server(az) as ps:
        base = ps.url.removesuffix("/mcp")
        async with httpx2.AsyncClient() as http:
            for path in ("/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"):
                r = await http.get(base + path)
                assert r.status_code == 200, path
                assert r.json() == {
                    "resource": ps.url,
                    "authorization_servers": [az.issuer],
                    "bearer_methods_supported": ["header"],
                    "scopes_supported": ["mcp"],
                }
                assert r.headers["access-control-allow-origin"] == "*"
            assert (await http.post(base + "/.well-known/oauth-protected-resource")).status_code == 405


async def test_challenges_for_each_failure() -> None:
    async with authz_server() as az, protected_mcp_server(az) as ps:
        az.audience = ps.url
        metadata_url = ps.url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp")
        cases: list[tuple[str | None, int, str | None, str]] = [
            (None, 401, None, ""),
            ("Bearer " + az.mint(scope="mcp", exp_in=-300), 401, "invalid_token", "the access token expired"),
            ("Bearer " + az.mint(scope="mcp", aud="http://127.0.0.1:1/mcp"), 401, "invalid_token", "not issued for"),
            ("Bearer " + az.mint(scope="mcp", iss="https://evil.test"), 401, "invalid_token", "issuer is not trusted"),
            ("Bearer " + az.mint(scope="mcp")[:-6] + "AAAAAA", 401, "invalid_token", "signature is invalid"),
            ("Bearer " + az.mint(scope="profile"), 403, "insufficient_scope", "lacks a required scope"),
            ("Basic dXNlcjpwYXNz", 401, None, ""),
        ]
        async with httpx2.AsyncClient() as http:
            for authorization, status, error, description in cases:
                headers = dict(HEADERS)
                if authorization is not None:
                    headers["Authorization"] = authorization
                r = await http.post(ps.url, headers=headers, content=json.dumps(INIT))
                assert r.status_code == status, (authorization, r.text)
                params = challenge_params(r.headers["www-authenticate"])
                assert params["resource_metadata"] == metadata_url
                assert params["scope"] == "mcp"
                assert params.get("error") == error
                assert description in params.get("error_description", "")
                body = r.json()
                assert set(body) == {"error", "error_description"}
                if authorization is not None and authorization.startswith("Bearer "):
                    token = authorization[7:]
                    assert token[:16] not in r.text and token[-16:] not in r.text
            # A valid token passes the guard and reaches the MCP server.
            headers = {**HEADERS, "Authorization": "Bearer " + az.mint("alice", scope="mcp")}
            r = await http.post(ps.url, headers=headers, content=json.dumps(INIT))
            assert r.status_code == 200, r.text
        assert [i.subject for i in ps.identities] == ["alice"]


class MemoryStorage(TokenStorage):
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class AutoBrowser:
    """Plays the user's browser: follows the authorization URL to the auto-approving server
    and hands the redirect's ``code``/``state``/``iss`` to the SDK's callback handler."""

    def __init__(self) -> None:
        self.result: AuthorizationCodeResult | None = None
        self.visits: list[str] = []

    async def redirect(self, url: str) -> None:
        self.visits.append(url)
        async with httpx2.AsyncClient() as http:
            r = await http.get(url)
        assert r.status_code == 302, r.text
        query = parse_qs(urlsplit(r.headers["location"]).query)
        self.result = AuthorizationCodeResult(
            code=query["code"][0], state=query.get("state", [None])[0], iss=query.get("iss", [None])[0]
        )

    async def callback(self) -> AuthorizationCodeResult:
        assert self.result is not None
        return self.result


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_official_sdk_oauth_client_discovers_and_completes_the_flow(mode: str) -> None:
    async with authz_server() as az, protected_mcp_server(az, tools=("echo", "other")) as ps:
        browser = AutoBrowser()
        storage = MemoryStorage()
        provider = OAuthClientProvider(
            server_url=ps.url,
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
                async with Client(streamable_http_client(ps.url, http_client=http), mode=mode) as client:
                    tools = await client.list_tools()
                    assert {t.name for t in tools.tools} == {"echo", "other"}
                    result = await client.call_tool("echo", {"x": "1"})
                    assert not result.is_error
        # It found the metadata through the 401, registered itself, and used PKCE with the
        # resource indicator: the token's audience is this server, its scope the challenged one.
        assert ps.authorizations[0] is None
        assert len(browser.visits) == 1
        authorize = parse_qs(urlsplit(browser.visits[0]).query)
        assert authorize["code_challenge_method"] == ["S256"] and authorize["resource"] == [ps.url]
        assert authorize["scope"] == ["mcp"]
        assert az.token_requests["authorization_code"] == 1
        assert storage.client is not None and storage.client.client_id in az.clients
        assert ps.identities and all(i.subject == "alice" and "mcp" in i.scopes for i in ps.identities)
        assert all(a == f"Bearer {az.issued[0]}" for a in ps.authorizations[1:] if a is not None)
        assert ps.resource_server.validator is not None
        assert ps.resource_server.validator.issuers[az.issuer].fetches == 1


async def test_a_legacy_session_stays_with_the_subject_that_opened_it() -> None:
    """The guard hands the SDK's session manager the principal: a refreshed token of the same
    subject keeps the session, another subject, another client application of the same user
    (issue 30, ADR 0011) or a static owner of the same name gets 404."""
    async with authz_server() as az, protected_mcp_server(az) as ps:
        az.audience = ps.url
        list_tools = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
        async with httpx2.AsyncClient() as http:

            async def post(token: str, body: dict[str, object], session: str | None = None) -> httpx2.Response:
                headers = {**HEADERS, "Authorization": f"Bearer {token}"}
                if session is not None:
                    headers["Mcp-Session-Id"] = session
                    headers["MCP-Protocol-Version"] = "2025-11-25"
                return await http.post(ps.url, headers=headers, content=json.dumps(body))

            opened = await post(az.mint("alice", scope="mcp"), INIT)
            assert opened.status_code == 200, opened.text
            session = opened.headers["mcp-session-id"]
            initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            assert (await post(az.mint("alice", scope="mcp"), initialized, session)).status_code == 202
            # A new token for alice (a refresh): same principal, same session.
            refreshed = await post(az.mint("alice", scope="mcp"), list_tools, session)
            assert refreshed.status_code == 200 and "echo" in refreshed.text
            # Another subject is refused as if the session did not exist; so is alice through
            # another client application: the identity is (issuer, subject, client id).
            assert (await post(az.mint("bob", scope="mcp"), list_tools, session)).status_code == 404
            other_client = az.mint("alice", scope="mcp", claims={"client_id": "other-app"})
            assert (await post(other_client, list_tools, session)).status_code == 404
        assert [i.subject for i in ps.identities].count("bob") == 1
