"""Idle 2025-era sessions cost little memory (issue 26: 10,000 idle sessions within 60 MB of
RSS; ADR 0038 "Idle sessions"). 500 sessions are opened through the real plane over loopback HTTP
(``initialize`` + ``notifications/initialized``, then nothing) and the gateway's Python heap
growth is measured with ``tracemalloc`` (the test's own HTTP client excluded). Before the lazy
per-session state (event history, memory streams, events, reply tables, shared client params)
this was ~12.5 KiB per session; then ~6.9 KiB; now ~2.0 KiB, with equal grant maps and views
shared between sessions (``reconciler/sharing.py``), the session's lock made on first use and the
front door unbound by the session table instead of a callback on each connection's exit stack.
The bound has margin for the shared box and other changes, and fails on the previous code.

Sharing must not cost a duty: when the sessions end (here: reaped idle) every binding and every
session made for them goes (I18: the table's bounds come back; nothing kept per dead session)."""

from __future__ import annotations

import gc
import json
import tracemalloc
from pathlib import Path

import anyio
import httpx2
import pytest

from mcp_reconciler.api.server import serve_http
from tests.api.conftest import WAIT, backdate, upstream_source

pytestmark = pytest.mark.anyio

SESSIONS = 500
#: Bytes of heap per idle session allowed (first code: ~12,900; then ~6,900; now ~2,050).
BOUND = 4 * 1024
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
CLIENT_SIDE = [tracemalloc.Filter(False, pattern) for pattern in ("*httpx*", "*httpcore*", "*h11*", "*tracemalloc*")]


async def open_sessions(http: httpx2.AsyncClient, url: str, n: int) -> list[str]:
    sids: list[str] = []

    async def one() -> None:
        r = await http.post(url, json=INITIALIZE, headers=HEADERS)
        assert r.status_code == 200, r
        sid = r.headers["mcp-session-id"]
        headers = {**HEADERS, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
        done = await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
        assert done.status_code == 202, done
        sids.append(sid)

    for start in range(0, n, 8):
        async with anyio.create_task_group() as tg:
            for _ in range(min(8, n - start)):
                tg.start_soon(one)
    return sids


async def test_I18_idle_2025_sessions_cost_under_4_kib_each_and_reaping_gives_all_back(tmp_path: Path) -> None:
    cfg = tmp_path / "gateway.yaml"
    limits = {"transport_sessions": 2000, "transport_sessions_per_client": 2000, "session_idle_s": 600}
    gateway = {"cooldown_s": 0, "anonymous": {"grant_policy": "current"}, "limits": limits}
    cfg.write_text(json.dumps({"gateway": gateway, "sources": [upstream_source("up", "a")]}))
    backdate(cfg)
    pool = httpx2.Limits(max_connections=8, max_keepalive_connections=8)
    async with serve_http(cfg, host="127.0.0.1", port=0, watch_interval_s=0.1) as served:
        async with httpx2.AsyncClient(timeout=WAIT, limits=pool) as http:
            await open_sessions(http, served.url, 50)  # warm: first-use allocations are not per session
            gc.collect()
            tracemalloc.start(1)
            try:
                before = tracemalloc.take_snapshot().filter_traces(CLIENT_SIDE)
                sids = await open_sessions(http, served.url, SESSIONS)
                gc.collect()
                after = tracemalloc.take_snapshot().filter_traces(CLIENT_SIDE)
            finally:
                tracemalloc.stop()
            assert served.transport_sessions is not None
            assert served.transport_sessions.open_sessions() == SESSIONS + 50
            growth = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
            top = after.compare_to(before, "filename")[:5]
            per_session = growth / len(sids)
            print(f"\nidle 2025-era session: {per_session:.0f} B by tracemalloc")
            assert per_session < BOUND, (per_session, [(str(s.traceback), s.size_diff // SESSIONS) for s in top])
            front = served.front
            assert len(front.sessions.bindings) >= SESSIONS + 50
            owned = [b.session.id for b in front.sessions.bindings.values() if b.era == "legacy"]
            assert len(owned) == SESSIONS + 50 and all(front.authority.get(sid) for sid in owned)
            await served.transport_sessions.reap(anyio.current_time() + 601)  # all idle past session_idle_s
            assert served.transport_sessions.open_sessions() == 0
            assert not [b for b in front.sessions.bindings.values() if b.era == "legacy"]  # unbound
            assert not [sid for sid in owned if front.authority.get(sid) is not None]  # their sessions removed
