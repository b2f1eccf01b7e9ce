"""Identity per client, scopes per request (issue 30, ADR 0011) with the local authorization
server (``tests/support/authz_server.py``) and a real gateway on 127.0.0.1, in both eras.

An OAuth identity is (issuer, subject, client id): another application's token of the same user
is another principal and never inherits its grants. What a request may use comes from the token
it presents: a later, narrower token of the same user and client narrows access at once (the
sessionless 2026-07-28 era: the session of exactly its grants; a 2025-11-25 session opened with
other grants refuses it, -32018 ``grants_changed``)."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx2
import pytest

from mcp_reconciler.reconciler.authority import oauth_principal_id
from tests.api.conftest import WAIT, call_error, mcp_client, tool_names
from tests.api.test_oauth_gateway import bearer, oauth_gateway, owners
from tests.support.authz_server import authz_server
from tests.support.raw_mcp import legacy_open, legacy_request, messages
from tests.support.raw_mcp import tool_names as raw_tool_names

pytestmark = pytest.mark.anyio

GRANTS = {"policy": "explicit", "scope_prefix": "tool:"}
WIDE, NARROW = "mcp tool:up__a tool:up__b", "mcp tool:up__a"


async def test_I25_a_narrower_later_token_narrows_access_at_once_sessionless_era(tmp_path: Path) -> None:
    async with authz_server() as az, oauth_gateway(tmp_path, az, grants=GRANTS) as served:
        wide = az.mint("alice", scope=WIDE, claims={"azp": "app-1"})
        narrow = az.mint("alice", scope=NARROW, claims={"azp": "app-1"})
        with anyio.fail_after(WAIT):
            async with mcp_client(served, mode="auto", headers=bearer(wide)) as mcp:
                assert await tool_names(mcp) == {"up__a", "up__b"}
                assert not (await mcp.call_tool("up__b", {})).is_error
            async with mcp_client(served, mode="auto", headers=bearer(narrow)) as mcp:
                assert await tool_names(mcp) == {"up__a"}  # the same user and client, fewer scopes
                refused = await call_error(mcp, "up__b")
                assert "up__b" in refused.error.message  # unknown to it, like a name that does not exist
                assert not (await mcp.call_tool("up__a", {})).is_error
            async with mcp_client(served, mode="auto", headers=bearer(wide)) as mcp:
                assert await tool_names(mcp) == {"up__a", "up__b"}  # evaluated per request, both ways
        assert owners(served) == {oauth_principal_id(az.issuer, "alice", "app-1")}


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_I25_another_clients_token_for_the_same_user_never_inherits_grants(mode: str, tmp_path: Path) -> None:
    async with authz_server() as az, oauth_gateway(tmp_path, az, grants=GRANTS) as served:
        first = az.mint("alice", scope=WIDE, claims={"client_id": "wide-app"})
        second = az.mint("alice", scope=NARROW, claims={"azp": "narrow-app"})
        with anyio.fail_after(WAIT):
            async with mcp_client(served, mode=mode, headers=bearer(first)) as mcp:
                assert await tool_names(mcp) == {"up__a", "up__b"}
                async with mcp_client(served, mode=mode, headers=bearer(second)) as other:
                    assert await tool_names(other) == {"up__a"}
                    await call_error(other, "up__b")
                    assert owners(served) == {
                        oauth_principal_id(az.issuer, "alice", "wide-app"),
                        oauth_principal_id(az.issuer, "alice", "narrow-app"),
                    }
                assert await tool_names(mcp) == {"up__a", "up__b"}


async def test_I25_a_2025_session_refuses_a_token_with_other_grants_and_another_client(tmp_path: Path) -> None:
    async with (
        authz_server() as az,
        oauth_gateway(tmp_path, az, grants=GRANTS) as served,
        httpx2.AsyncClient(timeout=WAIT) as http,
    ):
        wide = bearer(az.mint("alice", scope=WIDE, claims={"azp": "app-1"}))
        opened = await legacy_open(http, served.url, wide)
        assert opened.status_code == 200, opened.text
        sid = opened.headers["mcp-session-id"]
        assert raw_tool_names(await legacy_request(http, served.url, sid, "tools/list", headers=wide)) == {
            "up__a",
            "up__b",
        }
        # A refreshed token with the same scopes keeps the session.
        same = bearer(az.mint("alice", scope=WIDE, claims={"azp": "app-1"}))
        assert raw_tool_names(await legacy_request(http, served.url, sid, "tools/list", headers=same)) == {
            "up__a",
            "up__b",
        }
        # A narrower token of the same user and client: refused on this session, at once.
        narrow = bearer(az.mint("alice", scope=NARROW, claims={"azp": "app-1"}))
        for method, params in (("tools/list", {}), ("tools/call", {"name": "up__b", "arguments": {}})):
            r = await legacy_request(http, served.url, sid, method, params, headers=narrow)
            (msg,) = [m for m in messages(r) if "id" in m]
            assert msg["error"]["code"] == -32018 and msg["error"]["data"]["code"] == "grants_changed", msg
        # Opened with the narrow token, a session has exactly its grants.
        mine = await legacy_open(http, served.url, narrow)
        own = mine.headers["mcp-session-id"]
        assert raw_tool_names(await legacy_request(http, served.url, own, "tools/list", headers=narrow)) == {"up__a"}
        # Another client's token of the same user: another principal, so the session is not found.
        other = bearer(az.mint("alice", scope=WIDE, claims={"azp": "app-2"}))
        r = await legacy_request(http, served.url, sid, "tools/list", headers=other)
        assert r.status_code == 404 and "up__b" not in r.text
        for session_id, headers in ((sid, wide), (own, narrow)):
            await http.delete(served.url, headers={**headers, "mcp-session-id": session_id})


async def test_I25_control_api_sessions_belong_to_the_client_that_created_them(tmp_path: Path) -> None:
    async with authz_server() as az, oauth_gateway(tmp_path, az) as served, httpx2.AsyncClient(timeout=WAIT) as http:
        v1 = served.base_url + "/v1"
        app1 = bearer(az.mint("bob", scope="mcp", claims={"azp": "app-1"}))
        app2 = bearer(az.mint("bob", scope="mcp", claims={"azp": "app-2"}))
        created = await http.post(v1 + "/sessions", json={"grant_policy": "none"}, headers=app1)
        assert created.status_code == 201, created.text
        session = created.json()
        assert session["owner"] == oauth_principal_id(az.issuer, "bob", "app-1")
        assert (await http.get(v1 + f"/sessions/{session['id']}", headers=app1)).status_code == 200
        assert (await http.get(v1 + f"/sessions/{session['id']}", headers=app2)).status_code == 404
        assert (await http.get(v1 + "/sessions", headers=app2)).json()["sessions"] == []


def test_I25_no_subject_can_spell_another_identitys_principal_id() -> None:
    assert oauth_principal_id("https://idp", "alice", "app") != oauth_principal_id("https://idp", "alice#app")
    assert oauth_principal_id("https://idp", "alice", "") == "oauth:https://idp:alice"  # no client: as before
    assert oauth_principal_id("https://idp", "a%23b") != oauth_principal_id("https://idp", "a#b")


async def test_I25_sessionless_sessions_per_principal_are_bounded_at_n_and_n_plus_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcp_reconciler.api.frontdoor import sessions as front_sessions

    monkeypatch.setattr(front_sessions, "MODERN_PER_PRINCIPAL", 2)
    async with authz_server() as az, oauth_gateway(tmp_path, az, grants=GRANTS) as served:
        authority = served.gateway.engine.sessions
        scopes = ("mcp tool:up__a", "mcp tool:up__b", WIDE)  # three entitlements of one principal
        seen: list[set[str]] = []
        with anyio.fail_after(WAIT):
            for n, scope in enumerate(scopes, start=1):
                async with mcp_client(served, mode="auto", headers=bearer(az.mint("alice", scope=scope))) as mcp:
                    assert await tool_names(mcp) == {f"up__{x}" for x in scope.replace("tool:up__", "").split()[1:]}
                seen.append({s.id for s in authority.sessions()})
                assert len(seen[-1]) == min(n, 2)  # N = 2 kept; at N + 1 the oldest is dropped
            assert seen[0] <= seen[1] and not seen[0] & seen[2]
            async with mcp_client(served, mode="auto", headers=bearer(az.mint("alice", scope=scopes[0]))) as mcp:
                assert await tool_names(mcp) == {"up__a"}  # the dropped one comes back with its own grants
