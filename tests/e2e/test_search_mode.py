"""Search mode end to end (issue 31, ADR 0029): a gateway over a 2,000-tool upstream (the test
upstream serving ``tests/support/search_catalog.py``'s catalog over stdio), SDK clients of both
protocol eras over streamable HTTP. A session in search mode
lists ``find_tools`` and the always-visible tools, finds a tool by a natural-language request,
is told ``tools/list_changed``, sees the found tools listed and calls one as an ordinary tool."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import MCPError

from mcp_reconciler.api.server import serve_http
from mcp_reconciler.reconciler.search_index import LIMIT_MAX, QUERY_CHARS_MAX
from tests.e2e.conftest import downstream, payload, tool_names, upstream_source, write_config
from tests.support.search_catalog import catalog, labelled, name_of

pytestmark = pytest.mark.anyio
TOOLS = 2000


def search_config(tmp: Path, **extra: Any) -> Path:
    tools = tmp / "tools.json"
    tools.write_text(json.dumps(catalog(TOOLS)))
    cfg = write_config(tmp, sources=[upstream_source("up", "--tools-file", str(tools), "--page-size", "1000")], **extra)
    doc = json.loads(cfg.read_text())
    doc["discovery"] = {"mode": "search", "always_visible": ["up__progress"], "found_max": 8}
    doc["views"] = [{"name": "plain", "discovery": "all"}]
    cfg.write_text(json.dumps(doc))
    return cfg


def found_names(result: Any) -> list[str]:
    return [t["name"] for t in payload(result)["tools"]]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_I21_search_mode_finds_and_calls_the_right_tool_over_2000_tools(
    mode: str, tmp_path: Path
) -> None:
    cfg = search_config(tmp_path)
    async with serve_http(cfg, port=0) as served:
        async with downstream(served.url, mode) as (client, changes):
            assert await tool_names(client) == {"find_tools", "up__progress"}
            wanted = "up__" + name_of("jira", "create", "issue")
            result = await client.call_tool("find_tools", {"query": "open a new bug in jira", "limit": 5})
            body = payload(result)
            assert wanted in found_names(result), body
            revision = body["revision"]
            assert all(set(t) == {"name", "title", "description", "revision"} for t in body["tools"])
            assert all(t["revision"] == revision for t in body["tools"])
            assert body["dropped"] == []
            await changes.wait_tools(1)  # told in its era: a push (legacy) or the listen stream (2026)
            listed = await tool_names(client)
            assert listed == {"find_tools", "up__progress", *found_names(result)}
            called = payload(await client.call_tool(wanted, {"fields": "title: login fails"}))
            assert called["tool"] == wanted.removeprefix("up__")
            # More searches: the found set stays within found_max (8), the oldest dropped and named.
            dropped: list[str] = []
            for query, _expected in labelled()[1:4]:
                dropped += payload(await client.call_tool("find_tools", {"query": query, "limit": 5}))["dropped"]
            assert wanted in dropped
            listed = await tool_names(client)
            assert len(listed) == 2 + 8 and wanted not in listed
        # The index was built once for this revision and is reported in status (/v1/status's model).
        assert served.control is not None
        status = (await served.control.status_model()).model_dump()
        [index] = [i for i in status["search_indexes"] if i["view"] is None]
        assert index["revision"] == revision
        assert index["tools"] >= TOOLS and index["bytes"] > 0 and index["build_ms"] > 0


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_view_in_mode_all_lists_everything_and_has_no_find_tools(mode: str, tmp_path: Path) -> None:
    cfg = search_config(tmp_path)
    async with serve_http(cfg, port=0) as served:
        async with downstream(served.url + "/plain", mode) as (client, _changes):
            names = await tool_names(client)
            assert "find_tools" not in names and len(names) > TOOLS


async def test_find_tools_arguments_are_bounded_at_n_and_n_plus_1(tmp_path: Path) -> None:
    """The query's length and the limit an outsider sends are bounded: N answers, N+1 is refused
    with invalid params naming the bound (search_index.QUERY_CHARS_MAX, LIMIT_MAX)."""
    cfg = search_config(tmp_path)
    async with serve_http(cfg, port=0) as served:
        async with downstream(served.url, "auto") as (client, _changes):
            at_bound = "jira " * (QUERY_CHARS_MAX // 5) + "x" * (QUERY_CHARS_MAX % 5)
            assert len(at_bound) == QUERY_CHARS_MAX
            assert payload(await client.call_tool("find_tools", {"query": at_bound, "limit": LIMIT_MAX}))["tools"]
            with pytest.raises(MCPError, match=f"at most {QUERY_CHARS_MAX} characters"):
                await client.call_tool("find_tools", {"query": at_bound + "x"})
            for limit in (0, LIMIT_MAX + 1):
                with pytest.raises(MCPError, match=f"from 1 to {LIMIT_MAX}"):
                    await client.call_tool("find_tools", {"query": "jira", "limit": limit})
