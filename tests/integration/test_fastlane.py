"""The fast lane is indistinguishable on the wire (issue 12, ADR 0019).

One gateway (in process, streamable HTTP on 127.0.0.1) over two real upstreams: ``h`` over
streamable HTTP (2026-07-28 upstream era: the fast upstream lane applies) and ``s`` over stdio.
Downstream requests are raw HTTP POSTs in both eras, so the test sees the exact JSON the gateway
sends, not what an SDK client makes of it. Every request is sent twice on the same gateway and
the same upstream processes: once with every fast part on (list cache, call lane, upstream
poster) and once with all of them off (the normal lane); the two JSON-RPC responses must be
equal, and the lane must really have been taken when it was on."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from mcp_reconciler.api.frontdoor.passthrough import simple_call_result
from mcp_reconciler.api.server import Served, serve_http
from tests.e2e.conftest import ANONYMOUS_CURRENT, upstream_source
from tests.integration.conftest import HttpUpstreams

pytestmark = pytest.mark.anyio

WAIT = 20.0
ERAS = {"legacy": "2025-11-25", "modern": "2026-07-28"}
CLIENT_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "wire-test", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


class RawClient:
    """JSON-RPC over raw HTTP to the gateway, in one era; returns parsed response messages."""

    def __init__(self, http: httpx2.AsyncClient, url: str, era: str) -> None:
        self.http, self.url, self.era = http, url, era
        self.headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        self.ids = 0

    async def open(self) -> None:
        if self.era == "modern":
            self.headers["mcp-protocol-version"] = ERAS["modern"]
            return
        init = {
            "protocolVersion": ERAS["legacy"],
            "capabilities": {},
            "clientInfo": {"name": "wire-test", "version": "1"},
        }
        r = await self.http.post(
            self.url, json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}, headers=self.headers
        )
        self.headers |= {"mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": ERAS["legacy"]}
        await self.http.post(
            self.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=self.headers
        )

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.ids += 1
        headers = dict(self.headers)
        if self.era == "modern":
            params = {**params, "_meta": {**CLIENT_META, **params.get("_meta", {})}}
            headers["mcp-method"] = method
            if isinstance(params.get("name"), str):
                headers["mcp-name"] = params["name"]
        r = await self.http.post(
            self.url, json={"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params}, headers=headers
        )
        body = r.text
        if r.headers.get("content-type", "").startswith("text/event-stream"):
            body = [x[5:] for x in body.splitlines() if x.startswith("data:") and x[5:].strip()][-1]
        message: dict[str, Any] = json.loads(body)
        message.pop("id", None)
        return message


def set_lanes(served: Served, on: bool) -> None:
    """The front door's fast lanes on or off, at runtime (same gateway, same upstreams). The
    upstream side has one path whatever this says: the source's peer (ADR 0030)."""
    front = served.front
    front.list_cache.enabled = on
    front.call_lane.enabled = on


def _conn(served: Served, source: str) -> Any:
    live = served.front.catalog.current()
    assert live is not None
    state = live.generation.source_state(source)
    assert state is not None
    return state.connection


@asynccontextmanager
async def gateway(tmp_path: Path, http_upstreams: HttpUpstreams, upstream_era: str = "both") -> AsyncIterator[Served]:
    _proc, port = await http_upstreams.start("--tools", "a", "--era", upstream_era)
    doc = {
        "gateway": {"cooldown_s": 0.05, "anonymous": ANONYMOUS_CURRENT},
        "sources": [
            {"name": "h", "http": {"url": f"http://127.0.0.1:{port}/mcp"}},
            upstream_source("s", "--tools", "a"),
        ],
    }
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(json.dumps(doc))
    async with serve_http(cfg, port=0) as served:
        with anyio.fail_after(WAIT):
            while True:
                live = served.front.catalog.current()
                if live is not None and {"h__a", "s__a"} <= set(live.generation.tools):
                    break
                await anyio.sleep(0.05)
        yield served


REQUESTS: list[tuple[str, dict[str, Any]]] = [
    ("tools/call", {"name": "h__a", "arguments": {"x": 1, "nested": {"k": [1, "two", None]}}}),
    ("tools/call", {"name": "s__a", "arguments": {"x": "y"}}),
    ("tools/call", {"name": "h__a"}),
    ("tools/call", {"name": "h__fail_result", "arguments": {"text": "tool said no"}}),
    ("tools/call", {"name": "s__fail_result", "arguments": {"text": "tool said no"}}),
    ("tools/call", {"name": "h__fail_protocol", "arguments": {"text": "SECRET-upstream-text"}}),
    ("tools/call", {"name": "s__fail_protocol", "arguments": {"text": "SECRET-upstream-text"}}),
    ("tools/call", {"name": "h__nope", "arguments": {}}),
    ("tools/call", {"name": "h__a", "arguments": {}, "_meta": {"io.mcp-reconciler/revision": 999}}),
    ("tools/call", {"name": "h__a", "arguments": "not an object"}),
    ("tools/call", {"name": 5}),
    ("tools/list", {}),
    ("tools/list", {"cursor": "bogus"}),
    ("prompts/list", {}),
]


@pytest.mark.parametrize("upstream_era", ["both", "legacy"])
@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_both_lanes_answer_the_same_json(
    era: str, upstream_era: str, tmp_path: Path, http_upstreams: HttpUpstreams
) -> None:
    """``upstream_era`` ``both``: the HTTP upstream speaks 2026-07-28 (``JsonRpcPoster``);
    ``legacy``: 2025-11-25 only (``reconciler/legacy_lane.py`` over the same kind of poster)."""
    served_cm = gateway(tmp_path, http_upstreams, upstream_era)
    async with served_cm as served, httpx2.AsyncClient(timeout=WAIT) as http:
        client = RawClient(http, served.url, era)
        await client.open()
        h = _conn(served, "h")
        assert h.legacy == (upstream_era == "legacy")
        poster = h.http_peer.poster  # every request to the HTTP upstream goes through its peer
        assert _conn(served, "s").http_peer is None  # stdio: the SDK's session over our channel
        for method, params in REQUESTS:
            set_lanes(served, False)
            served_before = served.front.call_lane.served
            normal = await client.request(method, params)
            assert served.front.call_lane.served == served_before  # really the normal lane
            set_lanes(served, True)
            fast = await client.request(method, params)
            assert fast == normal, (method, params)
            if "SECRET" in json.dumps(params):
                assert "SECRET" not in json.dumps(fast)  # I12: upstream protocol text never passes
        set_lanes(served, True)
        before = served.front.call_lane.served, poster.exchanges
        ok = await client.request("tools/call", {"name": "h__a", "arguments": {"x": 1}})
        assert ok["result"]["_meta"]["io.mcp-reconciler/revision"] >= 1
        # A 2026 client's call to a 2025-era upstream runs as a held exchange (the upstream may ask
        # mid-call; api/frontdoor/exchanges.py): through the same peer.
        assert (served.front.call_lane.served, poster.exchanges) == (before[0] + 1, before[1] + 1)


async def test_a_result_the_lane_cannot_pass_through_is_validated() -> None:
    assert simple_call_result({"content": [{"type": "text", "text": "x"}], "isError": False, "_meta": {"a": 1}})
    assert simple_call_result({"content": [], "structuredContent": {"a": None}, "resultType": "complete"})
    for raw in (
        {"content": "not a list"},  # malformed: must be validated (and fail there, sanitized)
        {"content": [{"type": "text", "text": 1}]},
        {"content": [{"type": "resource_link", "uri": "file:///x", "name": "x"}]},  # a URI to rewrite
        {"content": [{"type": "text", "text": "x", "annotations": {}}]},
        {"content": [], "isError": "yes"},
        {"content": [], "extra": 1},
        {"content": [], "resultType": "input_required"},
        [],
    ):
        assert not simple_call_result(raw), raw
