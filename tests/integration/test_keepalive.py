"""Connection reuse for request streams (``reconciler/keepalive.py``): the SDK's streamable-HTTP
client, given :class:`KeepAliveTransport`, carries many calls to a real 2025-era MCP server
(uvicorn on 127.0.0.1) over a few TCP connections instead of one per call; a request stream that
does not end is still closed within the bound, and its connection is not reused."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import Receive, Scope, Send

from mcp_reconciler.reconciler import keepalive
from mcp_reconciler.reconciler.keepalive import KeepAliveTransport
from tests.support.asgi_server import served_asgi

pytestmark = pytest.mark.anyio

WAIT = 20.0


def tool_server() -> Server[Any]:
    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool(name="echo", input_schema={"type": "object"})])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(type="text", text="ok")])

    return Server("keepalive", on_list_tools=list_tools, on_call_tool=call_tool)


class PortCounter:
    """ASGI middleware: the client ports (one per TCP connection) that sent a POST."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.ports: set[int] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope.get("client"):
            self.ports.add(scope["client"][1])
        await self.app(scope, receive, send)


@contextlib.asynccontextmanager
async def legacy_client() -> AsyncIterator[tuple[Client, PortCounter]]:
    """A 2025-era SDK client over :class:`KeepAliveTransport` to a real server whose POSTs are
    counted by client port (one per TCP connection)."""
    manager = StreamableHTTPSessionManager(
        tool_server(), security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False)
    )
    counter = PortCounter(manager.handle_request)
    async with manager.run(), served_asgi(counter) as base:
        transport = KeepAliveTransport(limits=httpx2.Limits(max_connections=16, max_keepalive_connections=8))
        async with httpx2.AsyncClient(transport=transport, timeout=httpx2.Timeout(WAIT)) as http:
            async with Client(streamable_http_client(f"{base}/mcp", http_client=http), mode="legacy") as client:
                yield client, counter


async def test_calls_to_a_legacy_http_server_reuse_their_connections() -> None:
    async with legacy_client() as (client, counter):
        before = len(counter.ports)
        with anyio.fail_after(WAIT):
            for _ in range(20):
                result = await client.call_tool("echo", {})
                assert not result.is_error
    # Without the drain every one of the 20 calls opens its own connection.
    assert len(counter.ports) - before <= 3, sorted(counter.ports)


async def test_a_request_stream_that_does_not_end_is_closed_within_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keepalive, "DRAIN_S", 0.05)
    forever = anyio.Event()
    counter: PortCounter

    async def endless_sse(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": b"data: first\r\n\r\n", "more_body": True})
        with anyio.move_on_after(WAIT):
            await forever.wait()  # never ends on its own (the client's close ends the request)

    counter = PortCounter(endless_sse)
    async with served_asgi(counter) as base:
        async with httpx2.AsyncClient(transport=KeepAliveTransport(), timeout=httpx2.Timeout(WAIT)) as http:
            for _ in range(2):
                async with http.stream("POST", base, content=b"{}") as response:
                    async for line in response.aiter_lines():
                        if line == "data: first":
                            break
                    started = time.monotonic()
                # Closing drained for at most the bound, then gave the connection up.
                assert time.monotonic() - started < 2.0
        assert len(counter.ports) == 2, "a connection whose stream never ended was not reused"


async def test_messages_answered_202_reuse_their_connections() -> None:
    """Notifications (and responses sent up) are answered ``202 Accepted`` with an empty body the
    SDK never reads: without the drain each one costs a new connection."""
    async with legacy_client() as (client, counter):
        before = len(counter.ports)
        with anyio.fail_after(WAIT):
            for i in range(20):
                # A cancellation of a request the server never saw: accepted, then ignored.
                cancel = types.CancelledNotificationParams(request_id=10_000 + i)
                await client.session.send_notification(types.CancelledNotification(params=cancel))
            await client.call_tool("echo", {})  # after the notifications: all were sent
    assert len(counter.ports) - before <= 2, sorted(counter.ports)
