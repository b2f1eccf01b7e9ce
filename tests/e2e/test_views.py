"""Curation and named views end to end (issue 27, ADR 0026), with real upstreams over stdio: the
bundled example servers (``examples/upstreams``: clock with tools and a prompt, notes with
resources) and the test upstream (which can change its tools at runtime), behind a gateway on
127.0.0.1 and clients of both protocol eras."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import MCPError
from mcp.client.streamable_http import streamable_http_client

from mcp_reconciler.api.server import serve_http
from mcp_reconciler.reconciler.authority import GrantPolicy, principal_id
from mcp_reconciler.reconciler.metadata import PROVENANCE_META
from mcp_reconciler.sdk.http_client import mcp_http_client
from tests.e2e.conftest import (
    REPO_ROOT,
    WAIT,
    call_error,
    downstream,
    notifier_caught_up,
    stdio_gateway,
    tool_names,
    upstream_source,
)
from tests.support.raw_mcp import legacy_headers, legacy_open

pytestmark = pytest.mark.anyio
EXAMPLES = REPO_ROOT / "examples"


def curated_config(tmp: Path, *, work_deny: list[str]) -> Path:
    """Three real upstreams, curated: clock (prefix ``clk``, ``tick`` denied, ``now`` and the
    prompt renamed), notes (resources), up (an allow list keeps two tools and ``set_tools``);
    views ``clock`` (the clock only) and ``work`` (notes and up, minus ``work_deny``)."""
    data = tmp / "data"
    if not data.exists():
        shutil.copytree(EXAMPLES / "demo" / "data", data)
    up = upstream_source("up", "--tools", "a,b")
    up["tools"] = {"allow": ["a", "b", "set_tools"]}
    doc: dict[str, Any] = {
        "gateway": {"cooldown_s": 0.05, "anonymous": {"grant_policy": "follow"}},
        "sources": [
            {
                "name": "clock",
                "stdio": {"command": sys.executable, "args": [str(EXAMPLES / "upstreams" / "clock_server.py")]},
                "prefix": "clk",
                "tools": {"deny": ["tick"]},
                "overrides": {"now": {"rename": "time_now"}, "what_time": {"rename": "ask_time"}},
            },
            {
                "name": "notes",
                "stdio": {
                    "command": sys.executable,
                    "args": [str(EXAMPLES / "upstreams" / "notes_server.py"), "--data", str(data)],
                },
            },
            up,
        ],
        "views": [
            {"name": "clock", "sources": ["clock"]},
            {"name": "work", "sources": ["notes", "up"], "tools": {"deny": work_deny}},
        ],
    }
    cfg = tmp / "gateway.yaml"
    cfg.write_text(json.dumps(doc))
    return cfg


def unknown_tool(error: MCPError) -> bool:
    return "unknown tool" in error.error.message


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_view_lists_exactly_its_entries_calls_a_renamed_tool_and_refuses_a_denied_one(
    mode: str, tmp_path: Path
) -> None:
    cfg = curated_config(tmp_path, work_deny=["up__b"])
    async with serve_http(cfg, port=0) as served:
        async with downstream(served.url + "/clock", mode) as (clock, _c):
            assert await tool_names(clock) == {"time_now"}
            assert [p.name for p in (await clock.list_prompts()).prompts] == ["ask_time"]
            assert (await clock.list_resources()).resources == []
            result = await clock.call_tool("time_now", {})  # forwarded under the upstream's name, "now"
            assert not result.is_error and "now" in json.loads(result.content[0].text)  # type: ignore[union-attr]
            listed = (await clock.list_tools()).tools[0]
            assert (listed.meta or {})[PROVENANCE_META]["upstream_name"] == "now"
            prompt = await clock.get_prompt("ask_time")
            assert "clock server says" in prompt.messages[0].content.text  # type: ignore[union-attr]
            for name in ("clk__tick", "clk__now", "up__a"):  # denied, renamed away, another view's
                assert unknown_tool(await call_error(clock, name))
        async with downstream(served.url + "/work", mode) as (work, _w):
            assert await tool_names(work) == {"notes__count_notes", "notes__get_note", "up__a", "up__set_tools"}
            uris = {str(r.uri) for r in (await work.list_resources()).resources}
            assert uris == {"note://first", "note://second"}
            read = await work.read_resource("note://first")
            assert read.contents and isinstance(read.contents[0], types.TextResourceContents)
            assert json.loads((await work.call_tool("up__a", {"k": "v"})).content[0].text)["tool"] == "a"  # type: ignore[union-attr]
            for name in ("up__b", "time_now", "up__block"):  # the view's deny, another view's, the source's allow
                assert unknown_tool(await call_error(work, name))
        async with downstream(served.url, mode) as (whole, _all):
            names = await tool_names(whole)
            # The catalog: source curation applies to everyone, a view's own deny only in the view.
            assert names == {"time_now", "notes__count_notes", "notes__get_note", "up__a", "up__b", "up__set_tools"}
            assert unknown_tool(await call_error(whole, "clk__tick"))
        status = await served.gateway.engine.status()
        counts = {v.name: (v.entries, dict(v.counts)) for v in status.views}
        assert counts["clock"][1] == {"tool": 1, "resource": 0, "resource_template": 0, "prompt": 1}
        assert counts["work"][1]["tool"] == 4 and counts["work"][1]["resource"] == 2


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_I9_a_session_of_one_view_cannot_call_a_name_of_another(mode: str, tmp_path: Path) -> None:
    cfg = curated_config(tmp_path, work_deny=[])
    async with serve_http(cfg, port=0) as served:
        engine = served.gateway.engine
        live = engine.current
        assert live is not None
        session = engine.sessions.create(
            principal_id("owner", "tests"), live.generation, policy=GrantPolicy.CURRENT, view="clock"
        )
        assert set(session.grants) == {"tool:time_now", "prompt:ask_time"}
        headers = {"Authorization": f"Bearer {session.token}"}
        async with mcp_http_client(headers=headers) as http:
            async with downstream(streamable_http_client(served.url + "/clock", http_client=http), mode) as (c, _):
                assert await tool_names(c) == {"time_now"}
                for name in ("up__a", "notes__count_notes", "clk__tick"):
                    assert unknown_tool(await call_error(c, name))
            # Its token on /mcp still sees only its view.
            async with downstream(streamable_http_client(served.url, http_client=http), mode) as (c, _):
                assert await tool_names(c) == {"time_now"}
                assert unknown_tool(await call_error(c, "up__a"))
        # Its token on another view's endpoint is refused before the SDK (and a view that does
        # not exist is 404 for everyone).
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
        accept = {"Accept": "application/json, text/event-stream", **headers}
        async with httpx2.AsyncClient(timeout=WAIT) as raw:
            refused = await raw.post(served.url + "/work", json=init, headers=accept)
            assert refused.status_code == 403 and refused.json()["error"] == "wrong_view"
            missing = await raw.post(served.url + "/nope", json=init, headers=accept)
            assert missing.status_code == 404 and missing.json()["error"] == "unknown_view"


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_curation_edit_reaches_a_follow_session_in_the_view_as_list_changed(mode: str, tmp_path: Path) -> None:
    cfg = curated_config(tmp_path, work_deny=["up__b"])
    async with serve_http(cfg, port=0) as served:
        engine = served.gateway.engine
        first = engine.current
        assert first is not None
        async with (
            downstream(served.url + "/work", mode) as (work, work_changes),
            downstream(served.url + "/clock", mode) as (_clock, clock_changes),
        ):
            assert "up__b" not in await tool_names(work)
            curated_config(tmp_path, work_deny=[])  # the operator lifts the view's deny
            await work_changes.wait_tools(1)
            assert "up__b" in await tool_names(work)
            assert json.loads((await work.call_tool("up__b", {})).content[0].text)["tool"] == "b"  # type: ignore[union-attr]
            now = engine.current
            assert now is not None and now.revision == first.revision + 1  # one revision, gateway-wide
            assert now.generation.source_state("up") is first.generation.source_state("up")  # nothing re-read
            # The other view's list did not change: its binding, compared at the new revision, owes nothing.
            bindings = list(served.front.bindings.values())
            await notifier_caught_up(served, bindings, now.revision)
            (clock_binding,) = [b for b in bindings if b.session.view == "clock"]
            assert clock_binding.notifications == 0 and not clock_binding.pending and clock_changes.tools == 0


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_stdio_serves_one_view(mode: str, tmp_path: Path) -> None:
    cfg = curated_config(tmp_path, work_deny=["up__b"])
    params = stdio_gateway(cfg)
    params = params.model_copy(update={"args": [*params.args, "--view", "work"]})
    async with downstream(params, mode) as (client, _changes):
        assert await tool_names(client) == {"notes__count_notes", "notes__get_note", "up__a", "up__set_tools"}
        assert json.loads((await client.call_tool("up__a", {})).content[0].text)["tool"] == "a"  # type: ignore[union-attr]
        for name in ("up__b", "time_now"):
            assert unknown_tool(await call_error(client, name))


async def test_stdio_refuses_a_view_the_config_does_not_declare(tmp_path: Path) -> None:
    cfg = curated_config(tmp_path, work_deny=[])
    params = stdio_gateway(cfg)
    with anyio.fail_after(WAIT):
        done = await anyio.run_process(
            [params.command, *params.args, "--view", "nope"], cwd=params.cwd, check=False, stdin=subprocess.DEVNULL
        )
    assert done.returncode == 2
    assert "no view named 'nope' in the config (declared: clock, work)" in done.stderr.decode()


async def test_a_legacy_transport_session_opened_on_one_view_is_refused_on_another(tmp_path: Path) -> None:
    cfg = curated_config(tmp_path, work_deny=[])
    async with serve_http(cfg, port=0) as served:
        def answer(body: str) -> dict[str, Any]:
            data = [line[5:].strip() for line in body.splitlines() if line.startswith("data:") and line[5:].strip()]
            return dict(json.loads(data[-1] if data else body))

        async with httpx2.AsyncClient(timeout=WAIT) as raw:
            opened = await legacy_open(raw, served.url + "/clock")  # initialized is answered 202
            assert opened.status_code == 200, opened.text
            session = legacy_headers(opened.headers["mcp-session-id"])
            listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
            here = answer((await raw.post(served.url + "/clock", json=listing, headers=session)).text)
            assert [t["name"] for t in here["result"]["tools"]] == ["time_now"]
            there = answer((await raw.post(served.url + "/work", json=listing, headers=session)).text)
            assert there["error"]["code"] == -32018 and there["error"]["data"]["code"] == "wrong_view", there
