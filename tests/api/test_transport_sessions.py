"""Transport sessions (issue 10, item 6; I18): the SDK's streamable-HTTP sessions of the
2025-11-25 era are bounded in total and per client, separately from the control API's sessions,
and reaped after ``session_idle_s`` without traffic.

Clients authenticate with session tokens (the control API's ``POST /v1/sessions``): per-client
counting is per credential. Each ``initialize`` is a raw HTTP POST, so the test sees the status
code of every refusal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import pytest

from mcp_reconciler.api.plane.sessions import client_key
from mcp_reconciler.api.server import Served
from tests.api.conftest import WAIT, served_gateway, write_config
from tests.support.waits import until

pytestmark = pytest.mark.anyio

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


async def initialize(http: httpx2.AsyncClient, served: Served, token: str) -> httpx2.Response:
    return await http.post(served.url, json=INITIALIZE, headers={**HEADERS, "authorization": f"Bearer {token}"})


async def delete(http: httpx2.AsyncClient, served: Served, token: str, session_id: str) -> None:
    r = await http.delete(
        served.url, headers={**HEADERS, "authorization": f"Bearer {token}", "mcp-session-id": session_id}
    )
    assert r.status_code in (200, 204), r


def token_of(served: Served, owner: str) -> str:
    return served.front.authority.create(owner, None).token


async def test_per_client_and_total_transport_session_limits_at_n_and_n_plus_1(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, gateway={"limits": {"transport_sessions": 5, "transport_sessions_per_client": 3}})
    async with served_gateway(cfg) as served, httpx2.AsyncClient(timeout=WAIT) as http:
        manager = served.transport_sessions
        assert manager is not None
        alice, bob, carol = token_of(served, "alice"), token_of(served, "bob"), token_of(served, "carol")
        opened = [await initialize(http, served, alice) for _ in range(3)]  # N per client
        assert [r.status_code for r in opened] == [200, 200, 200]
        refused = await initialize(http, served, alice)  # N+1 for this client
        assert refused.status_code == 429, refused
        body: dict[str, Any] = refused.json()
        assert body["error"]["data"] == {"code": "too_many_sessions", "retryable": True}
        assert [(await initialize(http, served, bob)).status_code for _ in range(2)] == [200, 200]  # 5 = N total
        assert (await initialize(http, served, carol)).status_code == 503  # N+1 total (the SDK's bound)
        assert manager.open_sessions() == 5
        # A session ending frees its client's slot (and the total).
        await delete(http, served, alice, opened[0].headers["mcp-session-id"])
        assert manager.sessions_of(client_key({"headers": [(b"authorization", f"Bearer {alice}".encode())]})) == 2
        assert (await initialize(http, served, alice)).status_code == 200
        # API sessions are not transport sessions: the control API still creates them.
        token_of(served, "dave")


async def test_idle_transport_sessions_are_reaped_after_session_idle_s(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, gateway={"limits": {"session_idle_s": 0.5, "transport_sessions_per_client": 2}})
    async with served_gateway(cfg) as served, httpx2.AsyncClient(timeout=WAIT) as http:
        manager = served.transport_sessions
        assert manager is not None
        alice = token_of(served, "alice")
        assert [(await initialize(http, served, alice)).status_code for _ in range(2)] == [200, 200]
        assert (await initialize(http, served, alice)).status_code == 429
        await until(
            lambda: not manager.open_sessions(),
            what="idle (no request, no GET stream): closed by the manager",
            timeout_s=WAIT,
        )
        assert (await initialize(http, served, alice)).status_code == 200  # the slots came back


def test_client_key_is_the_credential_else_the_peer_address() -> None:
    with_token = {"headers": [(b"authorization", b"Bearer abc")], "client": ("10.0.0.1", 5)}
    other_peer = {"headers": [(b"authorization", b"Bearer abc")], "client": ("10.0.0.2", 6)}
    assert client_key(with_token) == client_key(other_peer)  # one credential, wherever it comes from
    assert "abc" not in client_key(with_token)  # the token itself is never kept
    assert client_key({"headers": [], "client": ("10.0.0.1", 5)}) == "peer:10.0.0.1"
    assert client_key({"headers": [], "client": ("10.0.0.1", 7)}) == client_key(
        {"headers": [], "client": ("10.0.0.1", 5)}
    )
