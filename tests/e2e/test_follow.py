"""The ``follow`` grant policy end to end (I9's standing grant, issue 11 item 6): a following
session sees every tool the catalog gains — for all sources or the listed ones — and gets
``tools/list_changed`` for it, in both protocol eras, from real upstreams over stdio that add the
tool at runtime; sessions that do not follow gain nothing; drift policy (I10) still applies to
definitions a following session has already seen."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp.client.streamable_http import streamable_http_client

from mcp_reconciler.api.frontdoor import DRIFT_META, Binding
from mcp_reconciler.api.mcp_auth import ANONYMOUS
from mcp_reconciler.api.server import Served, serve_http
from mcp_reconciler.reconciler.authority import GrantPolicy, principal_id
from mcp_reconciler.sdk.http_client import mcp_http_client
from tests.e2e.conftest import (
    WAIT,
    Publications,
    all_tools,
    downstream,
    notifier_caught_up,
    payload,
    tool_names,
    upstream_source,
    write_config,
)
from tests.support.waits import until

pytestmark = pytest.mark.anyio


async def _binding(served: Served, principal: str) -> Binding:
    """The front door's binding of ``principal`` (legacy clients are bound asynchronously, at
    their handshake's ``initialized`` notification)."""

    def found() -> list[Binding]:
        return [b for b in served.front.bindings.values() if b.principal == principal]

    await until(lambda: bool(found()), what=f"{principal}'s binding", timeout_s=WAIT)
    return found()[0]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_follow_sessions_see_new_upstream_tools_and_get_list_changed(mode: str, tmp_path: Path) -> None:
    sources = [upstream_source("up", "--tools", "a"), upstream_source("other", "--tools", "x")]
    # Anonymous callers follow the source "up" only.
    cfg = write_config(tmp_path, sources=sources, gateway={"anonymous": {"grant_policy": "follow", "sources": ["up"]}})
    async with serve_http(cfg, port=0) as served:
        pubs = Publications(served)
        engine = served.gateway.engine
        live = engine.current
        assert live is not None
        owner = principal_id("owner", "tests")
        # With tokens: one session following every source, one that does not follow.
        everything = engine.sessions.create(owner, live.generation, policy=GrantPolicy.FOLLOW)
        fixed = engine.sessions.create(owner, live.generation, policy=GrantPolicy.CURRENT)
        async with (
            mcp_http_client(headers={"Authorization": f"Bearer {everything.token}"}) as http_all,
            mcp_http_client(headers={"Authorization": f"Bearer {fixed.token}"}) as http_fixed,
            downstream(served.url, mode) as (anon, anon_changes),
            downstream(streamable_http_client(served.url, http_client=http_all), mode) as (follower, follower_changes),
            downstream(streamable_http_client(served.url, http_client=http_fixed), mode) as (stays, stays_changes),
        ):
            anon_binding = await _binding(served, ANONYMOUS)
            names = await tool_names(anon)
            assert "up__a" in names and not any(n.startswith("other__") for n in names)  # follows "up" only
            assert {"up__a", "other__x"} <= await tool_names(follower)

            # "up" adds a tool at runtime (its own list_changed → a new revision): both followers
            # are told and can call it at once; the session that does not follow gains nothing.
            await stays.call_tool("up__set_tools", {"names": ["a", "c"]})
            rev = (await pubs.wait_for(lambda g: "up__c" in g.tools)).revision
            await anon_changes.wait_tools(1)
            await follower_changes.wait_tools(1)
            assert "up__c" in await tool_names(anon) and "up__c" in await tool_names(follower)
            assert payload(await anon.call_tool("up__c", {"x": "1"}))["tool"] == "c"
            assert "up__c" not in await tool_names(stays)

            # "other" adds a tool: the every-source follower gets it; the "up" follower is neither
            # granted it nor told anything.
            await stays.call_tool("other__set_tools", {"names": ["x", "y"]})
            rev = (await pubs.wait_for(lambda g: "other__y" in g.tools)).revision
            await follower_changes.wait_tools(2)
            assert "other__y" in await tool_names(follower)
            await notifier_caught_up(served, [anon_binding], rev)
            assert anon_changes.tools == 1 and not anon_binding.pending
            assert "other__y" not in await tool_names(anon)
            assert stays_changes.tools == 0 and "other__y" not in await tool_names(stays)

            # Drift: a definition the followers have seen changes → flagged (policy flag), never
            # silently re-granted as if it were new (I10).
            await stays.call_tool("up__set_tools", {"names": ["a", "c"], "descriptions": {"c": "changed"}})
            await pubs.wait_above(rev)
            for client in (anon, follower):
                tools, _ = await all_tools(client)
                (c_tool,) = [t for t in tools if t.name == "up__c"]
                assert (c_tool.meta or {}).get(DRIFT_META) is True
                result = await client.call_tool("up__c", {})
                assert (result.meta or {}).get(DRIFT_META) is True
