"""Chaos with the shared store: two gateway replicas on one ``redis-server`` that is SIGSTOPped,
then killed with -9 and restarted empty, while an agent keeps calling. Never a silent fallback:
calls on shared sessions get a retryable ``cluster_unavailable``, ``/readyz`` goes 503 and
control-API writes answer 503 while the store is not confirmed; local reconciling goes on; after
the store returns everything works again and nothing is lost (the replicas write back what they
know to a store that lost its data)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import MCPError

from tests.cluster.processes import Replica, agent, cluster_config, start_all, write_tools
from tests.support.redis_server import RedisServer
from tests.support.waits import until

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def _call_fails_retryably(replica: Replica, token: str) -> None:
    async with agent(replica.url, token) as (client, _):
        with pytest.raises(MCPError) as refused:
            await client.call_tool("up__echo", {})
    data = refused.value.error.data
    assert isinstance(data, dict) and data["code"] == "cluster_unavailable" and data["retryable"] is True, data


async def _call_works(replica: Replica, token: str) -> None:
    async with agent(replica.url, token) as (client, _):
        assert not (await client.call_tool("up__echo", {})).is_error


@pytest.mark.parametrize("fault", ["sigstop", "kill9"])
async def test_store_outage_fails_closed_visibly_and_recovers(
    fault: str, redis_server: RedisServer, tmp_path: Path
) -> None:
    tools = tmp_path / "tools.json"
    write_tools(tools, ["echo"])
    cfg = cluster_config(tmp_path, tools, staleness_s=1.0)
    a, b = Replica("A", tmp_path, cfg, redis_server.url), Replica("B", tmp_path, cfg, redis_server.url)
    try:
        await start_all(a, b)
        created = await a.post("/v1/sessions", {"grant_policy": "current"})
        assert created.status_code == 201, created.text
        sid, token = created.json()["id"], created.json()["token"]
        await b.until(f"/v1/sessions/{sid}", 200)
        await _call_works(b, token)

        if fault == "sigstop":
            redis_server.sigstop()
        else:
            redis_server.kill()
        await a.until_ready(False)
        await b.until_ready(False)
        ready = await a.get("/readyz")
        assert ready.json()["reason"] == "cluster_unconfirmed", ready.text
        await _call_fails_retryably(b, token)
        refused = await a.post("/v1/sessions", {"grant_policy": "current"})
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "cluster_unavailable", refused.text
        revoke = await b.delete(f"/v1/sessions/{sid}")
        assert revoke.status_code == 503, revoke.text
        # Local reconciling continues: an upstream change is still published (numbered locally).
        before = (await a.status())["revision"]
        write_tools(tools, ["echo", "add"])
        refreshed = await a.post("/v1/refresh", {"wait": True, "timeout_s": 60, "sources": ["up"]})
        assert refreshed.status_code in (200, 503), refreshed.text

        async def published() -> bool:  # another process's state, from its control API
            return bool((await a.status())["revision"] != before)

        await until(published, what=f"a revision after {before} on A", timeout_s=30)

        if fault == "sigstop":
            redis_server.sigcont()
        else:
            await redis_server.start()  # empty: no persistence
        await a.until_ready(True, timeout_s=30)
        await b.until_ready(True, timeout_s=30)
        # Nothing lost: the session still works on both replicas, and it can be revoked now.
        await _call_works(a, token)
        await _call_works(b, token)
        deleted = await b.delete(f"/v1/sessions/{sid}")
        assert deleted.status_code == 204, deleted.text
        await a.until(f"/v1/sessions/{sid}", 404)
        for r in (a, b):
            assert "Traceback" not in r.stderr(), r.stderr()[-3000:]
    finally:
        a.kill()
        b.kill()
