"""``mcp-reconciler stdio`` (the data plane on stdio, ``api/plane/stdio.py``, issue 26) against the
same gateway over streamable HTTP (``serve_http``, ``/mcp``): the same config (one stdio
upstream), the SDK's own client over the SDK's ``stdio_client`` to the stdio gateway and over
``streamable_http_client`` to ``/mcp``, the same request sequence in both protocol eras —
results and protocol errors equal (the upstream's pid aside: each gateway starts its own).
Progress notifications reach the caller before the result. (Until the switch-over this compared
the SDK-based stdio gateway with the plane; the SDK server directly is the oracle of
``test_plane_oracle.py``.)"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from mcp_reconciler.api.server import serve_http
from tests.e2e.conftest import ANONYMOUS_CURRENT, upstream_source
from tests.integration.conftest import REPO_ROOT
from tests.integration.test_stdio_oracle import scrub  # the upstream's pid differs between the two gateways

pytestmark = pytest.mark.anyio

WAIT = 30.0


@contextlib.asynccontextmanager
async def client(argv: list[str], mode: str) -> AsyncIterator[Client]:
    params = StdioServerParameters(command=sys.executable, args=argv, cwd=str(REPO_ROOT))
    with open(os.devnull, "w") as errlog:  # noqa: ASYNC230 - /dev/null never blocks
        async with Client(stdio_client(params, errlog=errlog), mode=mode) as c:
            yield c


@contextlib.asynccontextmanager
async def http_client(cfg: Path, mode: str) -> AsyncIterator[Client]:
    async with serve_http(cfg, port=0) as served, Client(streamable_http_client(served.url), mode=mode) as c:
        yield c


async def sequence(c: Client) -> list[Any]:
    """Every answer of one session, as JSON (errors as their code and message)."""
    out: list[Any] = []
    with anyio.fail_after(WAIT):
        while "s__a" not in {t.name for t in (await c.list_tools()).tools}:
            await anyio.sleep(0.05)  # the gateway publishes its first generation meanwhile
    steps: list[tuple[str, Any]] = [
        ("list_tools", lambda: c.list_tools()),
        ("call", lambda: c.call_tool("s__a", {"x": 1})),
        ("fail_result", lambda: c.call_tool("s__fail_result", {"text": "no"})),
        ("fail_protocol", lambda: c.call_tool("s__fail_protocol", {"text": "SECRET"})),
        ("unknown", lambda: c.call_tool("s__nope", {})),
        ("prompts", lambda: c.list_prompts()),
        ("resources", lambda: c.list_resources()),
    ]
    for name, step in steps:
        try:
            result = await step()
            out.append((name, scrub(result.model_dump(mode="json", by_alias=True, exclude_none=True))))
        except MCPError as exc:
            out.append((name, exc.error.code, exc.error.message))
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    result = await c.call_tool("s__progress", {"n": 3}, progress_callback=on_progress)
    out.append(("progress", progress, scrub(result.model_dump(mode="json", by_alias=True, exclude_none=True))))
    return out


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_stdio_answers_as_the_gateway_over_http(mode: str, tmp_path: Path) -> None:
    cfg = tmp_path / "gw.yaml"
    doc = {"gateway": {"anonymous": ANONYMOUS_CURRENT}, "sources": [upstream_source("s", "--tools", "a,b")]}
    cfg.write_text(json.dumps(doc))
    async with http_client(cfg, mode) as http:
        before = await sequence(http)
    async with client(["-m", "mcp_reconciler.api.cli", "stdio", "--config", str(cfg)], mode) as stdio:
        after = await sequence(stdio)
    assert after == before
    assert len(after[-1][1]) == 3  # the three progress notifications arrived before the result
    assert "SECRET" not in json.dumps(after)
