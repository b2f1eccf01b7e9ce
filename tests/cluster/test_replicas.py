"""Three gateway replicas as processes sharing one ``redis-server``: a session created on A is
used on B and C; a grant on C produces ``list_changed`` on A's streams in both eras; ``POST
/v1/refresh`` waits for every live replica; a hold on A keeps the revision alive on B; replicas
agree on revision numbers; a revoke on B is rejected on A; a replica killed with -9 leaves the
others serving its sessions, and restarted empty it answers a retryable ``revision_unavailable``
for an old revision, then catches up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from tests.cluster.processes import Replica, agent, cluster_config, write_tools
from tests.support.redis_server import RedisServer
from tests.support.waits import until

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}


async def revisions(*replicas: Replica) -> list[int | None]:
    return [(await r.status())["revision"] for r in replicas]


async def test_three_replicas_share_sessions_grants_holds_and_revisions(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    tools = tmp_path / "tools.json"
    write_tools(tools, ["echo"])
    cfg = cluster_config(tmp_path, tools)
    a, b, c = (Replica(n, tmp_path, cfg, redis_server.url) for n in "ABC")
    try:
        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                for r in (a, b, c):
                    tg.start_soon(r.start)
        r1 = await revisions(a, b, c)
        assert r1[0] is not None and len(set(r1)) == 1, r1  # same content, same revision everywhere
        status = await a.status()
        assert status["cluster"]["healthy"] and not status["cluster"]["diverged"], status["cluster"]

        # A session created on A is used on B and C.
        created = await a.post("/v1/sessions", {"grant_policy": "explicit", "names": ["up__echo"]})
        assert created.status_code == 201, created.text
        sid, token = created.json()["id"], created.json()["token"]
        for r in (b, c):  # at once: a token another replica minted is loaded on first use
            async with agent(r.url, token) as (client, _):
                result = await client.call_tool("up__echo", {})
                assert not result.is_error, result

        # A grant on C reaches A's streams as list_changed, in both eras.
        async with agent(a.url, token, "legacy") as (_, legacy), agent(a.url, token, "2026-07-28") as (_, modern):
            granted = await c.post(f"/v1/sessions/{sid}/grants", {"names": ["up__echo"]})
            assert granted.status_code == 200, granted.text
            write_tools(tools, ["echo", "add"])
            # Refresh on A waits for every live replica's cycle (each reads its own upstream).
            refreshed = await a.post("/v1/refresh", {"wait": True, "timeout_s": 60})
            assert refreshed.status_code == 200, refreshed.text
            body = refreshed.json()
            assert body["replicas_done"] == ["B", "C"] and body["replicas_pending"] == [], body
            r2 = await revisions(a, b, c)
            assert len(set(r2)) == 1 and r2[0] == r1[0] + 1, (r1, r2)
            granted = await c.post(f"/v1/sessions/{sid}/grants", {"names": ["up__add"]})
            assert granted.status_code == 200, granted.text
            await legacy.wait_tools(1)
            await modern.wait_tools(1)

        # A hold made on A is honoured on B: B keeps revision r2 live past a newer publication.
        held = await a.post(f"/v1/revisions/{r2[0]}/holds", {"ttl_s": 120})
        assert held.status_code == 201, held.text

        async def held_on_b() -> bool:  # another process's state, from its control API
            return bool((await b.status())["holds"] >= 1)

        await until(held_on_b, what="the hold made on A seen on B", timeout_s=20)
        write_tools(tools, ["echo", "add", "third"])
        refreshed = await b.post("/v1/refresh", {"wait": True, "timeout_s": 60})
        assert refreshed.json()["replicas_pending"] == [], refreshed.text
        r3 = await revisions(a, b, c)
        assert len(set(r3)) == 1 and r3[0] == r2[0] + 1, (r2, r3)
        assert (await b.get("/v1/catalog", params={"revision": r2[0]})).status_code == 200

        # kill -9 C: A and B keep serving the session; restarted empty, C does not have r2 (held
        # elsewhere) and says so retryably, and serves the current revision with the same number.
        c.kill()
        async with agent(b.url, token) as (client, _):
            assert not (await client.call_tool("up__add", {})).is_error
        await c.start()
        old = await c.get("/v1/catalog", params={"revision": r2[0]})
        assert old.status_code == 503 and old.json()["error"]["code"] == "revision_unavailable", old.text
        assert await revisions(c) == [r3[0]]
        async with agent(c.url, token) as (client, _):
            assert not (await client.call_tool("up__add", {})).is_error

        # Revoked on B: rejected on A (the token no longer authenticates).
        assert (await b.delete(f"/v1/sessions/{sid}")).status_code == 204
        await a.until(f"/v1/sessions/{sid}", 404)
        async with httpx2.AsyncClient(timeout=10) as http:
            init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT}
            answer = await http.post(
                a.url,
                json=init,
                headers={"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"},
            )
        assert answer.status_code == 401, answer.text
        for r in (a, b, c):
            assert "Traceback" not in r.stderr(), r.stderr()[-3000:]
    finally:
        for r in (a, b, c):
            r.kill()


async def test_a_replica_whose_catalog_differs_from_the_head_says_how(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """Two replicas whose upstreams serve different tools: the one that is not at the ledger's
    head is ``diverged`` in status, with the difference per source and the replica it compared
    against (issue 13, item 4; I11)."""
    dirs = [tmp_path / "a", tmp_path / "b"]
    for d, tools in zip(dirs, (["echo"], ["echo", "add"]), strict=True):
        d.mkdir()
        write_tools(d / "tools.json", tools)
    a = Replica("A", dirs[0], cluster_config(dirs[0], dirs[0] / "tools.json"), redis_server.url)
    b = Replica("B", dirs[1], cluster_config(dirs[1], dirs[1] / "tools.json"), redis_server.url)
    try:
        with anyio.fail_after(120):
            await a.start()
            await b.start()  # its content differs: the ledger appends, B is the head now
            seen: dict[str, dict[str, Any]] = {}

            async def diverged() -> bool:  # other processes' state, from their control APIs
                seen["a"], seen["b"] = (await a.status())["cluster"], (await b.status())["cluster"]
                return bool(seen["a"]["diverged"] and seen["a"]["difference"])

            await until(diverged, what=lambda: f"A to report its divergence: {seen}", timeout_s=120)
            sa, sb = seen["a"], seen["b"]
        assert not sb["diverged"] and sb["difference"] == [], sb
        assert sa["difference"] == ["up: its entries or status differ from the head (replica B)"], sa
    finally:
        a.kill()
        b.kill()
