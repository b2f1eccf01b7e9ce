"""``Mcp-Param-*`` headers of a 2026-07-28 ``tools/call`` on a served gateway, against the SDK
server behind it (the oracle): a tool whose input schema annotates a param with ``x-mcp-header``
needs the header to match the argument (``HEADER_MISMATCH`` otherwise); a tool without
annotations takes the call whatever ``Mcp-Param-*`` headers come with it. The gateway looks the
annotation up once per definition (``Listing.param_header_schema``, ADR 0041), so both kinds of
tool are checked here, and a stray header on the plain tool must not make it check anything. The
gateway is a client of the upstream too: its forwarded call carries the ``Mcp-Param-*`` headers
the upstream's annotation asks for (``CatalogEntry.call_headers``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp_types import HEADER_MISMATCH

from tests.integration.conftest import REPO_ROOT, HttpUpstreams
from tests.integration.conftest import http_upstreams as http_upstreams  # the fixture
from tests.support.gateway_process import gateway_process
from tests.support.raw_mcp import ACCEPT, MODERN, rpc

pytestmark = pytest.mark.anyio

WAIT = 20.0
TOOLS = [
    {"name": "routed", "properties": {"region": "where"}, "headers": {"region": "Region"}},
    {"name": "plain", "properties": {"region": "where"}},
]
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}


def call(name: str, region: str) -> bytes:
    return json.dumps(rpc("tools/call", {"name": name, "arguments": {"region": region}, "_meta": ENVELOPE})).encode()


def headers(name: str, **extra: str) -> dict[str, str]:
    return {**ACCEPT, "mcp-protocol-version": MODERN, "mcp-method": "tools/call", "mcp-name": name, **extra}


def outcome(response: httpx2.Response) -> tuple[int, Any]:
    """Status and the JSON-RPC error code (``None``: a result)."""
    body = response.json()
    return response.status_code, body["error"]["code"] if "error" in body else None


async def test_param_headers_checked_for_annotated_tools_only(tmp_path: Path, http_upstreams: HttpUpstreams) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS))
    _, port = await http_upstreams.start("--tools-file", str(tools))
    direct = f"http://127.0.0.1:{port}/mcp"
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(
        "gateway: {anonymous: {grant_policy: current}, cooldown_s: 0.05}\n"
        f"sources:\n  - name: up\n    http: {{url: '{direct}'}}\n"
    )
    serve = [sys.executable, "-m", "mcp_reconciler.api.cli", "serve", "--config", str(cfg), "--port", "0"]
    async with gateway_process(serve, cwd=REPO_ROOT) as gw, httpx2.AsyncClient(timeout=WAIT) as http:
        await gw.wait_line(r"revision \d+: .*'up__routed'")
        cases = [  # (tool, region in the body, extra headers)
            ("routed", "eu", {}),  # missing: mismatch
            ("routed", "eu", {"mcp-param-region": "us"}),  # differs: mismatch
            ("plain", "eu", {}),  # nothing annotated: served
            ("plain", "eu", {"mcp-param-region": "us"}),  # a stray header checks nothing
        ]
        seen = []
        for tool, region, extra in cases:
            sdk = await http.post(direct, content=call(tool, region), headers=headers(tool, **extra))
            ours = await http.post(gw.url, content=call("up__" + tool, region), headers=headers("up__" + tool, **extra))
            assert outcome(ours) == outcome(sdk), (tool, extra, ours.text, sdk.text)
            seen.append(outcome(ours)[1])
        assert seen == [HEADER_MISMATCH, HEADER_MISMATCH, None, None]
        with anyio.fail_after(WAIT):  # the cached answer holds on a second call too
            again = await http.post(gw.url, content=call("up__routed", "eu"), headers=headers("up__routed"))
        assert outcome(again)[1] == HEADER_MISMATCH
        # A matching header passes the gateway's edge, and the gateway mirrors the argument into
        # its own Mcp-Param-* header upstream (the tool's annotation as the upstream listed it):
        # the upstream, which checks it, serves the call — as it serves the SDK's client.
        matched = await http.post(
            gw.url, content=call("up__routed", "eu"), headers=headers("up__routed", **{"mcp-param-region": "eu"})
        )
        sdk = await http.post(
            direct, content=call("routed", "eu"), headers=headers("routed", **{"mcp-param-region": "eu"})
        )
        assert outcome(sdk) == (200, None), sdk.text
        assert outcome(matched) == (200, None), matched.text
        assert matched.json()["result"]["content"] == sdk.json()["result"]["content"]
        # The same matching header twice: a mismatch at both (first- and last-copy readers would
        # disagree). The gateway reads its headers through a dict on the hot path; this check
        # must still see the raw list.
        twice = [*headers("up__routed").items(), ("mcp-param-region", "eu"), ("mcp-param-region", "eu")]
        sdk_twice = [*headers("routed").items(), ("mcp-param-region", "eu"), ("mcp-param-region", "eu")]
        ours_twice = await http.post(gw.url, content=call("up__routed", "eu"), headers=twice)
        sdk_answer = await http.post(direct, content=call("routed", "eu"), headers=sdk_twice)
        assert outcome(ours_twice) == outcome(sdk_answer), (ours_twice.text, sdk_answer.text)
        assert outcome(sdk_answer)[1] == HEADER_MISMATCH
