"""The benchmarks' floor, ``bench/byte_relay.py``, relays both protocol eras (issue 26).

The SDK's own client, through the relay to the SDK server (``tests.support.upstream_server``): the
handshake era (``Mcp-Session-Id`` minted upstream and carried back and forth, the standalone GET
stream streamed while it stays open, DELETE at the end) and the 2026-07-28 era (per-request
``MCP-Protocol-Version``/``Mcp-Method``/``Mcp-Name`` headers, a ``subscriptions/listen`` SSE
response streamed as it arrives). A floor that silently dropped a header or buffered a stream
would measure something other than what the gateway does."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client

from tests.integration.conftest import REAP_TIMEOUT_S, HttpUpstreams, wait_for_file
from tests.support.readme import REPO_ROOT

pytestmark = pytest.mark.anyio

RELAY = REPO_ROOT / "bench" / "byte_relay.py"


@contextlib.asynccontextmanager
async def byte_relay(upstream_url: str, tmp: Path) -> AsyncIterator[str]:
    """The relay as a subprocess in front of ``upstream_url``; yields its ``/mcp`` URL."""
    port_file = tmp / "relay.port"
    argv = [sys.executable, str(RELAY), "--upstream", upstream_url, "--port-file", str(port_file)]
    async with await anyio.open_process(
        argv, cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=None, stderr=None
    ) as proc:
        try:
            port = int(await wait_for_file(port_file))
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            proc.terminate()
            with anyio.fail_after(REAP_TIMEOUT_S):
                await proc.wait()


def text_of(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def test_byte_relay_carries_a_2025_session_and_its_standalone_stream(
    http_upstreams: HttpUpstreams, tmp_path: Path
) -> None:
    _, port = await http_upstreams.start("--tools", "echo")
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    async with byte_relay(f"http://127.0.0.1:{port}/mcp", tmp_path) as url:
        async with Client(url, mode="legacy", message_handler=on_message) as client:
            assert client.protocol_version == "2025-11-25"
            assert "echo" in {t.name for t in (await client.list_tools()).tools}
            out = await client.call_tool("echo", {"x": "1"})
            assert '"x": "1"' in text_of(out)
            # The announcement rides the session's standalone GET stream: relayed while it is open.
            await client.call_tool("set_tools", {"names": ["echo", "two"]})
            with anyio.fail_after(10):
                await changed.wait()
            assert "two" in {t.name for t in (await client.list_tools()).tools}


async def test_byte_relay_carries_2026_requests_and_a_listen_stream(
    http_upstreams: HttpUpstreams, tmp_path: Path
) -> None:
    _, port = await http_upstreams.start("--tools", "echo")
    async with byte_relay(f"http://127.0.0.1:{port}/mcp", tmp_path) as url:
        async with Client(url, mode="2026-07-28") as client:
            assert client.protocol_version == "2026-07-28"
            assert "echo" in {t.name for t in (await client.list_tools()).tools}
            out = await client.call_tool("echo", {"x": "2"})
            assert '"x": "2"' in text_of(out)
            async with client.listen(tools_list_changed=True) as sub:
                await client.call_tool("set_tools", {"names": ["echo", "three"]})
                with anyio.fail_after(10):
                    async for _event in sub:
                        break  # the change event arrived on the streamed listen response
            assert "three" in {t.name for t in (await client.list_tools()).tools}
