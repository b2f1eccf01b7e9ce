"""Idle expiry of control-API sessions (ADR 0032, I25) on a real gateway on 127.0.0.1: a session
unused for ``gateway.limits.api_session_idle_s`` is removed (its token stops working); one in use
never is — a call in flight, an open MCP connection, a live hold of its owner — and its JSON says
when it would expire. The expiry is judged at an explicit "now" (``expire_idle``), so the tests
need no sleep; one test lets the gateway's own expiry task remove a session."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import httpx2
import pytest

from mcp_reconciler.reconciler.authority import Authority, Session
from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.model import SessionSpec
from tests.api.conftest import ALICE, BOB, OPERATOR_TOKEN, WAIT, mcp_client, served_gateway, write_config
from tests.support.waits import until

pytestmark = pytest.mark.anyio

IDLE_S = 600.0


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_I25_an_unused_api_session_expires_at_its_idle_time_and_not_before() -> None:
    authority = Authority(Bounds(api_session_idle_s=60))
    session = authority.create("owner::alice", None, operator=False)
    t0 = session.created_at
    assert authority.expires_at(session) == t0 + 60
    assert authority.expire_idle(t0 + 59.9) == []  # N - ε: kept
    session.last_active_at = t0 + 30  # activity moves the expiry
    assert authority.expire_idle(t0 + 60) == [] and authority.expires_at(session) == t0 + 90
    assert authority.expire_idle(t0 + 90) == [session.id]  # N: removed, its token with it
    assert authority.get(session.id) is None and authority.by_token(session.token) is None
    assert authority.owned_by("owner::alice") == 0  # its quota slot is free again


def test_I25_a_session_in_use_never_expires() -> None:
    authority = Authority(Bounds(api_session_idle_s=60))
    busy, connected, held, idle = (authority.create(f"owner::{n}", None, operator=False) for n in "abcd")
    busy.in_flight = 1  # a request of it is running
    authority.on_in_use(lambda: {connected.id, "owner::c"})  # an open connection; an owner's hold
    far = time.time() + 10 * 60
    assert authority.expire_idle(far) == [idle.id]
    assert {s.id for s in authority.sessions()} == {busy.id, connected.id, held.id}
    assert all(authority.expires_at(s) is None for s in authority.sessions())
    busy.in_flight = 0
    assert authority.expire_idle(far) == [busy.id]


def test_I25_declared_transport_owned_and_shared_sessions_do_not_idle_out() -> None:
    authority = Authority(Bounds(api_session_idle_s=60))
    authority.declare([SessionSpec(name="ci", token="t" * 32, policy="none")], None)
    kinds: list[Session] = [
        authority.create("anonymous::", None, transport_owned=True),
        authority.create("owner::a", None, shared=True),
    ]
    assert authority.expire_idle(time.time() + 3600) == []
    assert len(authority.sessions()) == 1 + len(kinds)
    off = Authority(Bounds(api_session_idle_s=0))  # 0: never
    off.create("owner::a", None)
    assert off.expire_idle(time.time() + 10**9) == [] and off.next_expiry() is None


async def test_I25_idle_expiry_over_http_shows_in_the_json_and_spares_sessions_in_use(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, gateway={"limits": {"api_session_idle_s": IDLE_S}})
    async with served_gateway(cfg) as served:
        authority = served.gateway.engine.sessions
        later = time.time() + 2 * IDLE_S  # "now" for the expiry checks: every session is idle by then
        async with httpx2.AsyncClient(base_url=served.base_url, timeout=WAIT) as http:
            made = {}
            for name, token in (("alice", ALICE), ("bob", BOB), ("operator", OPERATOR_TOKEN)):
                r = await http.post("/v1/sessions", headers=_auth(token))
                assert r.status_code == 201
                made[name] = r.json()
                assert made[name]["expires_at"] == pytest.approx(made[name]["created_at"] + IDLE_S)
                assert made[name]["in_use"] is False

            # alice: an MCP connection (2025-11-25) is open and a call of hers is in flight.
            alice_headers = _auth(made["alice"]["token"])
            async with mcp_client(served, mode="legacy", headers=alice_headers) as mcp:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(mcp.call_tool, "up__block", {})
                    session = authority.get(made["alice"]["id"])
                    assert session is not None
                    await until(lambda: session.in_flight > 0, what="the call in flight")
                    shown = (await http.get(f"/v1/sessions/{session.id}", headers=_auth(ALICE))).json()
                    assert shown["in_use"] is True and shown["expires_at"] is None
                    # bob holds a revision: his sessions are in use too.
                    revision = served.gateway.engine.current_revision
                    hold = await http.post(f"/v1/revisions/{revision}/holds", json={"ttl_s": 60}, headers=_auth(BOB))
                    assert hold.status_code == 201
                    assert authority.expire_idle(later) == [made["operator"]["id"]]  # only the unused one
                    tg.cancel_scope.cancel()
                assert authority.expire_idle(later) == []  # the connection is still open
            await until(lambda: authority.expires_at(session) is not None, what="the connection to close")
            assert authority.expire_idle(later) == [made["alice"]["id"]]
            r = await http.get(f"/v1/sessions/{made['alice']['id']}", headers=_auth(ALICE))
            assert r.status_code == 404
            await http.delete(f"/v1/holds/{hold.json()['id']}", headers=_auth(BOB))
            assert authority.expire_idle(later) == [made["bob"]["id"]]


async def test_I25_the_gateway_expires_an_unused_session_by_itself(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, gateway={"limits": {"api_session_idle_s": 0.3}})
    async with served_gateway(cfg) as served:
        authority = served.gateway.engine.sessions
        gone = anyio.Event()
        async with httpx2.AsyncClient(base_url=served.base_url, timeout=WAIT) as http:
            r = await http.post("/v1/sessions", headers=_auth(ALICE))
            sid, token = r.json()["id"], r.json()["token"]
            authority.on_removed(lambda removed: gone.set() if removed == sid else None)
            with anyio.fail_after(WAIT):
                await gone.wait()
            r = await http.post("/mcp", headers={**_auth(token), "Content-Type": "application/json"}, json={})
            assert r.status_code == 401  # its token stopped working with it
