"""OAuth client credentials per upstream (``reconciler/upstream_auth.py``), against the local
authorization server and an OAuth-protected MCP upstream (``tests/support/protected_mcp.py``,
which records every ``Authorization`` header it receives).

- the auth alone: one token for many (and concurrent) requests, renewed before expiry (an
  injected clock), renewed once when the upstream answers 401, errors that never show secrets;
- through the gateway: a config with ``oauth:`` on an ``http`` source, a downstream session
  calling a tool — the upstream only ever sees the gateway's own client-credentials token, never
  the downstream client's credential (no token passthrough)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import anyio
import httpx2
import pytest

from mcp_reconciler.reconciler.upstream_auth import ClientCredentialsAuth, UpstreamAuthError, client_credentials_auth
from tests.api.conftest import OPERATOR_TOKEN, mcp_client, served_gateway, tool_names, write_config
from tests.support.authz_server import AuthorizationServer, authz_server
from tests.support.protected_mcp import protected_mcp_server

pytestmark = pytest.mark.anyio

WAIT = 20.0
SECRET = "gw-client-s3cret-51c0"
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def auth(az: AuthorizationServer, resource: str, clock: Clock | None = None, **kw: object) -> ClientCredentialsAuth:
    return ClientCredentialsAuth(
        token_url=az.token_url,
        client_id="gateway",
        client_secret=SECRET,
        scopes=("mcp",),
        resource=resource,
        clock=clock or Clock(),
        **kw,  # type: ignore[arg-type]
    )


async def initialize(http: httpx2.AsyncClient, url: str) -> int:
    return (await http.post(url, headers=HEADERS, content=json.dumps(INIT))).status_code


async def test_token_fetched_once_cached_and_shared_by_concurrent_requests() -> None:
    async with authz_server() as az, protected_mcp_server(az) as ps:
        az.add_client("gateway", SECRET)
        cc = auth(az, ps.url)
        async with httpx2.AsyncClient(auth=cc) as http:
            statuses: list[int] = []

            async def one() -> None:
                statuses.append(await initialize(http, ps.url))

            with anyio.fail_after(WAIT):
                async with anyio.create_task_group() as tg:
                    for _ in range(20):
                        tg.start_soon(one)
                for _ in range(5):
                    await one()
        assert statuses == [200] * 25
        assert az.token_requests["client_credentials"] == 1 and cc.token_fetches == 1
        assert ps.authorizations == [f"Bearer {az.issued[0]}"] * 25
        assert {i.subject for i in ps.identities} == {"gateway"}  # the gateway's own identity upstream
        assert SECRET not in repr(cc) and az.issued[0] not in repr(cc)


async def test_token_renewed_before_expiry() -> None:
    clock = Clock()
    async with authz_server() as az, protected_mcp_server(az) as ps:
        az.add_client("gateway", SECRET)
        az.token_lifetime_s = 600
        cc = auth(az, ps.url, clock, refresh_skew_s=60)
        async with httpx2.AsyncClient(auth=cc) as http:
            assert await initialize(http, ps.url) == 200
            clock.now += 539  # 1 s before lifetime - skew: still the cached token
            assert await initialize(http, ps.url) == 200
            assert az.token_requests["client_credentials"] == 1
            clock.now += 1  # now within the skew: renewed before it expires
            assert await initialize(http, ps.url) == 200
            assert az.token_requests["client_credentials"] == 2
            assert ps.authorizations == [f"Bearer {az.issued[0]}"] * 2 + [f"Bearer {az.issued[1]}"]
            # A short-lived token: the skew is capped at half its lifetime, not refetched per request.
            az.token_lifetime_s = 60
            clock.now += 10_000
            assert await initialize(http, ps.url) == 200
            clock.now += 29
            assert await initialize(http, ps.url) == 200
            assert az.token_requests["client_credentials"] == 3
            clock.now += 1
            assert await initialize(http, ps.url) == 200
            assert az.token_requests["client_credentials"] == 4


async def test_upstream_401_renews_once_and_replays() -> None:
    async with authz_server() as az, protected_mcp_server(az) as ps:
        az.add_client("gateway", SECRET)
        cc = auth(az, ps.url)
        async with httpx2.AsyncClient(auth=cc) as http:
            assert await initialize(http, ps.url) == 200
            ps.revoked.add(az.issued[0])  # revoked early by the authorization server
            assert await initialize(http, ps.url) == 200
            assert az.token_requests["client_credentials"] == 2
            assert ps.authorizations[-2:] == [f"Bearer {az.issued[0]}", f"Bearer {az.issued[1]}"]
            # Refused again with the renewed token: one renewal per request, then the 401 stands.
            ps.revoke_all = True
            before = len(ps.authorizations)
            assert await initialize(http, ps.url) == 401
            assert len(ps.authorizations) == before + 2
            assert az.token_requests["client_credentials"] == 3


async def test_token_endpoint_errors_name_status_and_code_only() -> None:
    async with authz_server() as az:
        az.add_client("gateway", "another-secret")
        cc = auth(az, "http://127.0.0.1:1/mcp")
        with pytest.raises(UpstreamAuthError) as exc:
            await cc.token()
        assert str(exc.value) == "token endpoint answered HTTP 401 (invalid_client)"
        assert SECRET not in str(exc.value)
        # client_secret_post works as well as basic.
        az.add_client("gateway", SECRET)
        post = auth(az, "http://127.0.0.1:1/mcp", auth_method="client_secret_post")
        assert await post.token() == az.issued[-1]
    dead = auth(az, "http://127.0.0.1:1/mcp", timeout_s=2)  # the server is gone now
    with pytest.raises(UpstreamAuthError) as exc:
        await dead.token()
    assert str(exc.value).startswith("token endpoint unreachable")


@pytest.mark.parametrize("over", [False, True])
async def test_token_answer_size_bound(over: bool) -> None:
    async with authz_server() as az:
        az.add_client("gateway", SECRET)
        # MAX_TOKEN_RESPONSE_BYTES is 64 KiB; the token itself and the JSON around it add ~1 KiB.
        az.token_response_extra = {"pad": "x" * ((66 if over else 62) * 1024)}
        cc = auth(az, "http://127.0.0.1:1/mcp")
        if over:
            with pytest.raises(UpstreamAuthError, match="too large"):
                await cc.token()
        else:
            assert await cc.token() == az.issued[-1]


def test_client_credentials_auth_from_a_transport_entry() -> None:
    assert client_credentials_auth(None) is None
    built = client_credentials_auth(
        {"token_url": "https://idp.test/token", "client_id": "c", "client_secret": "s", "scopes": ["a", "b"]}
    )
    assert built is not None and built.scopes == ("a", "b") and built.auth_method == "client_secret_basic"


@pytest.mark.parametrize("transport", ["http", "sse"])
async def test_gateway_upstream_sees_only_its_client_credentials_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, transport: Literal["http", "sse"]
) -> None:
    async with authz_server() as az, protected_mcp_server(az, tools=("echo", "lookup"), transport=transport) as ps:
        az.add_client("gateway", SECRET)
        monkeypatch.setenv("GW_UPSTREAM_SECRET", SECRET)
        source = {
            "name": "prot",
            transport: {
                "url": ps.url,
                "oauth": {
                    "token_url": az.token_url,
                    "client_id": "gateway",
                    "client_secret": "${GW_UPSTREAM_SECRET}",
                    "scopes": ["mcp"],
                    "resource": ps.url,
                },
            },
        }
        async with served_gateway(write_config(tmp_path, sources=[source])) as served:
            created = served.front.authority.create("alice", None)
            live = served.gateway.rec.runtime.current
            assert live is not None
            served.front.authority.grant(created, ["prot__echo"], live.generation)
            client_token = created.token
            with anyio.fail_after(WAIT):
                async with mcp_client(served, headers={"Authorization": f"Bearer {client_token}"}) as client:
                    assert await tool_names(client) == {"prot__echo"}
                    result = await client.call_tool("prot__echo", {"x": "hi"})
                    assert not result.is_error
            status = await served.control.status_model() if served.control else None
            assert status is not None and all(s.state == "ready" for s in status.sources)
        assert ps.server.calls == [("echo", {"x": "hi"})]
        cc_tokens = set(az.issued)
        assert len(cc_tokens) == 1 and az.token_requests["client_credentials"] == 1
        assert ps.authorizations and all(a == f"Bearer {az.issued[0]}" for a in ps.authorizations)
        for seen in ps.authorizations:
            assert client_token not in (seen or "") and OPERATOR_TOKEN not in (seen or "")
