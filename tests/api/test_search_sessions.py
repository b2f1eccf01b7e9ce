"""Search mode chosen per session over the control API (issue 31, ADR 0029), with real upstreams
and SDK clients of both eras: ``discovery: search`` on ``POST /v1/sessions`` gives the session
``find_tools``; a session pinned to a revision searches that revision's index; ``/v1/status``
reports each built index (revision, size, build time)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx2
import pytest

from mcp_reconciler.sdk import ReconcilerClient
from tests.api.conftest import (
    OPERATOR_TOKEN,
    backdate,
    mcp_client,
    served_gateway,
    tool_names,
    upstream_source,
    write_config,
)
from tests.api.test_cli import cli, cli_all
from tests.support.waits import until

pytestmark = pytest.mark.anyio


def hits(result: object) -> list[str]:
    body = result.structured_content  # type: ignore[attr-defined]
    assert isinstance(body, dict), result
    return [t["name"] for t in body["tools"]]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_search_mode_per_session_and_a_pinned_session_searches_its_revision(mode: str, tmp_path: Path) -> None:
    cfg = write_config(tmp_path, sources=[upstream_source("up", "alpha", "beta")])
    async with served_gateway(cfg) as served:
        engine = served.gateway.engine
        first = engine.current_revision
        assert first is not None
        async with ReconcilerClient(served.base_url, OPERATOR_TOKEN) as rc:
            plain = await rc.create_session(grant_policy="follow")
            searching = await rc.create_session(grant_policy="follow", discovery="search")
            await rc.hold(first, ttl_s=120)  # keeps the first revision live for the pinned run
            pinned = await rc.create_session(grant_policy="follow", discovery="search", revision=first)
            assert (plain.discovery, searching.discovery, searching.found) == ("all", "search", [])
            headers = {"Authorization": f"Bearer {searching.token}"}
            async with mcp_client(served, mode=mode, headers=headers) as mcp:
                assert await tool_names(mcp) == {"find_tools"}
                assert hits(await mcp.call_tool("find_tools", {"query": "alpha"})) == ["up__alpha"]
                assert await tool_names(mcp) == {"find_tools", "up__alpha"}
            assert (await rc.session(searching.id)).found == ["up__alpha"]
            async with mcp_client(served, mode=mode, headers={"Authorization": f"Bearer {plain.token}"}) as mcp:
                names = await tool_names(mcp)
                assert "find_tools" not in names and {"up__alpha", "up__beta"} <= names

            # A new source is published as the next revision; the follow sessions are granted it.
            doc = json.loads(cfg.read_text())
            doc["sources"].append(upstream_source("more", "zebra"))
            cfg.write_text(json.dumps(doc))
            backdate(cfg)
            await until(lambda: "more__zebra" in engine.current.generation.tools, what="the new revision")  # type: ignore[union-attr]
            second = engine.current_revision
            async with mcp_client(served, mode=mode, headers=headers) as mcp:
                found = await mcp.call_tool("find_tools", {"query": "zebra"})
                assert hits(found) == ["more__zebra"]
                assert found.structured_content["revision"] == second  # type: ignore[index]
            # Pinned to the first revision: that revision's index, which has no zebra.
            async with mcp_client(served, mode=mode, headers={"Authorization": f"Bearer {pinned.token}"}) as mcp:
                found = await mcp.call_tool("find_tools", {"query": "zebra alpha"})
                assert hits(found) == ["up__alpha"]
                assert found.structured_content["revision"] == first  # type: ignore[index]

        async with httpx2.AsyncClient(base_url=served.base_url, timeout=30) as http:
            status = (await http.get("/v1/status", headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"})).json()
        built = {(i["revision"], i["view"]): i for i in status["search_indexes"]}
        assert set(built) >= {(first, None), (second, None)}
        assert built[(first, None)]["tools"] >= 2 and built[(first, None)]["build_ms"] >= 0
        assert built[(second, None)]["bytes"] > 0


async def test_the_cli_creates_and_shows_a_search_mode_session(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, sources=[upstream_source("up", "alpha", "beta")])
    async with served_gateway(cfg) as served:
        env = {"url": served.base_url, "token": OPERATOR_TOKEN}
        made, bad = await cli_all(  # independent: at once (a Python start each)
            [
                (("sessions", "create", "--discovery", "search", "--json"), env),
                (("sessions", "create", "--discovery", "sometimes"), env),
            ]
        )
        assert made.code == 0, made
        created = json.loads(made.out)
        assert created["discovery"] == "search" and created["found"] == []
        headers = {"Authorization": f"Bearer {created['token']}"}
        async with mcp_client(served, mode="auto", headers=headers) as mcp:
            assert hits(await mcp.call_tool("find_tools", {"query": "beta"})) == ["up__beta"]
        shown = await cli("sessions", "show", created["id"], **env)
        assert "discovery   search; found: up__beta" in shown.out, shown.out
        assert bad.code != 0 and "--discovery" in bad.err
