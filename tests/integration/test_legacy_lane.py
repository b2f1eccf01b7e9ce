"""The legacy fast lane (``reconciler/legacy_lane.py``): calls to a real 2025-era MCP server over
streamable HTTP (uvicorn on 127.0.0.1), sent by an :class:`UpstreamConnection` without the SDK's
transport. What the SDK's transport does on that wire, the lane does too: the server's requests
on the call's stream are answered (through the peer switch, in the caller's context), its
cancellation of them is honoured, its log records are delivered, a stream the server ends
before the response is resumed with ``Last-Event-ID``, and a cancelled call is cancelled
upstream with ``notifications/cancelled``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.server import Server
from mcp.server.streamable_http import EventMessage, EventStore
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.message import ServerMessageMetadata

from mcp_reconciler.reconciler.fasthttp import JsonRpcPoster
from mcp_reconciler.reconciler.model import SourceSpec
from mcp_reconciler.reconciler.peer import PeerSwitch
from mcp_reconciler.reconciler.upstream import UpstreamConnection, default_targets
from tests.support.asgi_server import served_asgi

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::mcp.MCPDeprecationWarning")]

WAIT = 20.0
CALLER: ContextVar[str] = ContextVar("caller", default="nobody")


class Upstream:
    """A 2025-era server whose tools exercise everything a call's stream can carry."""

    def __init__(self) -> None:
        self.cancelled = anyio.Event()  # the ``hang`` tool saw its request cancelled
        self.hanging = anyio.Event()
        self.peer_asked = anyio.Event()  # the peer has the server's request
        self.finish = anyio.Event()
        self.calls = 0

    def server(self) -> Server[Any]:
        tools = ["ask", "log", "poll", "hang", "withdraw"]

        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            return types.ListToolsResult(tools=[types.Tool(name=n, input_schema={"type": "object"}) for n in tools])

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            self.calls += 1
            related = ServerMessageMetadata(related_request_id=ctx.request_id)
            if params.name == "ask":
                answer = await ctx.session.send_request(sample_request(), types.CreateMessageResult, metadata=related)
                return text_result(answer.content.text)
            if params.name == "log":
                await ctx.session.send_log_message("info", "working", logger="up", related_request_id=ctx.request_id)
                return text_result("logged")
            if params.name == "poll":
                await ctx.close_sse_stream()  # the client must resume with Last-Event-ID
                rid = ctx.request_id
                await ctx.session.send_log_message("info", "after close", logger="up", related_request_id=rid)
                return text_result("polled")
            if params.name == "withdraw":
                async with anyio.create_task_group() as tg:
                    tg.start_soon(ctx.session.send_request, sample_request(), types.CreateMessageResult, None, related)
                    await self.peer_asked.wait()
                    tg.cancel_scope.cancel()  # the server gives up on its own request
                await self.finish.wait()  # the call stays open: only that withdrawal can end the answer
                return text_result("withdrew")
            try:
                self.hanging.set()
                await anyio.sleep_forever()
            finally:
                self.cancelled.set()
            raise AssertionError("unreachable")

        return Server("legacy-up", on_list_tools=list_tools, on_call_tool=call_tool)


def sample_request() -> types.CreateMessageRequest:
    message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text="q"))
    return types.CreateMessageRequest(params=types.CreateMessageRequestParams(messages=[message], max_tokens=5))


def text_result(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


class Peer:
    """The edge's side: answers sampling with the caller's name, records what reached it."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.logs: list[tuple[str, str]] = []
        self.withdrawn = anyio.Event()
        self.arrived = anyio.Event()
        self.block = False

    async def on_request(self, conn: Any, request: Any, request_id: Any) -> Any:
        self.asked.append(CALLER.get())
        self.arrived.set()
        if self.block:
            try:
                await anyio.sleep_forever()
            finally:
                self.withdrawn.set()
        content = types.TextContent(type="text", text=f"for {CALLER.get()}")
        return types.CreateMessageResult(role="assistant", content=content, model="m")

    async def on_log(self, conn: Any, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append((CALLER.get(), str(params.data)))

    async def on_notification(self, conn: Any, notification: Any) -> None:
        pass


class MemoryEventStore(EventStore):
    """The upstream SDK server's event store (resumption of its streams): every event kept."""

    def __init__(self) -> None:
        self._events: list[tuple[str, str, Any]] = []

    async def store_event(self, stream_id: str, message: Any) -> str:
        event_id = f"{stream_id}:{len(self._events) + 1}"
        self._events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(self, last_event_id: str, send_callback: Any) -> str | None:
        index = next((i for i, (eid, _, _) in enumerate(self._events) if eid == last_event_id), None)
        if index is None:
            return None
        stream_id = self._events[index][1]
        for event_id, sid, message in self._events[index + 1 :]:
            if sid == stream_id and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream_id


@asynccontextmanager
async def connection(upstream: Upstream, peer: Peer, *, stateless: bool = False) -> AsyncIterator[UpstreamConnection]:
    manager = StreamableHTTPSessionManager(
        upstream.server(),
        event_store=None if stateless else MemoryEventStore(),
        retry_interval=None if stateless else 10,
        stateless=stateless,
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    switch = PeerSwitch()
    switch.attach(peer)

    async def app(scope: Any, receive: Any, send: Any) -> None:  # an ASGI 3 callable for uvicorn
        await manager.handle_request(scope, receive, send)

    async with manager.run(), served_asgi(app) as base:
        spec = SourceSpec(name="up", transport={"kind": "http", "url": f"{base}/mcp"})
        conn = UpstreamConnection(spec, default_targets, mode="legacy", peer=switch)
        async with anyio.create_task_group() as tg:
            await tg.start(conn.run)
            try:
                yield conn
            finally:
                await conn.aclose()


async def call(conn: UpstreamConnection, name: str, caller: str = "c1") -> str:
    CALLER.set(caller)
    request = types.CallToolRequest(params=types.CallToolRequestParams(name=name, arguments={}))
    raw = await conn.send_raw(request)
    result = types.CallToolResult.model_validate(raw)
    assert isinstance(result.content[0], types.TextContent)
    return result.content[0].text


async def test_a_call_takes_the_lane_and_the_servers_request_is_answered_in_the_callers_context() -> None:
    upstream, peer = Upstream(), Peer()
    async with connection(upstream, peer) as conn:
        assert conn.http_peer is not None
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                for caller in ("alice", "bob", "carol"):
                    tg.start_soon(lambda c=caller: check(conn, c))
        assert sorted(peer.asked) == ["alice", "bob", "carol"]  # each request attributed to its own call


async def check(conn: UpstreamConnection, caller: str) -> None:
    assert await call(conn, "ask", caller) == f"for {caller}"


async def test_a_stateless_server_is_served_by_the_peer_without_a_session_id() -> None:
    """A 2025-era server that gives no ``Mcp-Session-Id``: the session is known from the
    initialize answer (none) and every request still takes the peer (ADR 0030)."""
    upstream, peer = Upstream(), Peer()
    async with connection(upstream, peer, stateless=True) as conn:
        assert conn.http_peer is not None and conn.legacy
        before = conn.http_peer.poster.exchanges
        with anyio.fail_after(WAIT):
            assert await call(conn, "log", "fay") == "logged"
            listed = await conn.send(types.ListToolsRequest(params=None), types.ListToolsResult)
        assert [t.name for t in listed.tools][:2] == ["ask", "log"]
        assert conn.http_peer.poster.exchanges >= before + 2
        assert peer.logs == [("fay", "working")]


async def test_log_records_on_the_calls_stream_are_delivered_before_the_result() -> None:
    upstream, peer = Upstream(), Peer()
    async with connection(upstream, peer) as conn:
        with anyio.fail_after(WAIT):
            assert await call(conn, "log", "dora") == "logged"
        assert peer.logs == [("dora", "working")]


async def test_a_stream_the_server_ends_early_is_resumed_with_last_event_id() -> None:
    upstream, peer = Upstream(), Peer()
    async with connection(upstream, peer) as conn:
        with anyio.fail_after(WAIT):
            assert await call(conn, "poll", "erin") == "polled"
        assert ("erin", "after close") in peer.logs  # read from the resumed stream
        assert upstream.calls == 1  # resumed, never sent again


async def test_a_cancelled_call_is_cancelled_upstream() -> None:
    upstream, peer = Upstream(), Peer()
    async with connection(upstream, peer) as conn:
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(call, conn, "hang")
                await upstream.hanging.wait()
                tg.cancel_scope.cancel()
            await upstream.cancelled.wait()  # notifications/cancelled reached the server's handler
            assert await call(conn, "log") == "logged"  # and the connection still serves


async def test_the_server_withdrawing_its_request_cancels_the_answer_in_flight() -> None:
    upstream, peer = Upstream(), Peer()
    upstream.peer_asked = peer.arrived
    peer.block = True
    async with connection(upstream, peer) as conn:
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(call, conn, "withdraw")
                await peer.withdrawn.wait()  # while the call is still open
                upstream.finish.set()


async def test_a_request_the_client_does_not_know_is_answered_method_not_found() -> None:
    upstream, peer = Upstream(), Peer()
    async with connection(upstream, peer) as conn:
        answer = await conn.serve_request({"jsonrpc": "2.0", "id": 7, "method": "bogus/x", "params": {}})
        assert isinstance(answer, types.JSONRPCError) and answer.error.code == types.METHOD_NOT_FOUND
        answer = await conn.serve_request({"jsonrpc": "2.0", "id": 8, "method": "ping"})
        assert isinstance(answer, types.JSONRPCResponse) and answer.result == {}
        bad = {"jsonrpc": "2.0", "id": 9, "method": "sampling/createMessage", "params": {"messages": 3}}
        answer = await conn.serve_request(bad)
        assert isinstance(answer, types.JSONRPCError) and answer.error.code == types.INVALID_PARAMS


async def test_every_request_takes_the_peer() -> None:
    """One path (ADR 0030): a call and a ping are one exchange each on the source's peer."""
    upstream, peer = Upstream(), Peer()
    async with connection(upstream, peer) as conn:
        assert conn.http_peer is not None
        before = conn.http_peer.poster.exchanges
        with anyio.fail_after(WAIT):
            assert await call(conn, "log") == "logged"
            await conn.send(types.PingRequest(), types.EmptyResult)
        assert conn.http_peer.poster.exchanges == before + 2


async def test_the_lane_posts_on_one_kept_alive_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    exchanges: list[int] = []
    original = JsonRpcPoster.post

    async def counting(self: JsonRpcPoster, *args: Any, **kwargs: Any) -> Any:
        result = await original(self, *args, **kwargs)
        exchanges.append(self.exchanges)
        return result

    monkeypatch.setattr(JsonRpcPoster, "post", counting)
    upstream, peer = Upstream(), Peer()
    async with connection(upstream, peer) as conn:
        with anyio.fail_after(WAIT):
            for _ in range(5):
                assert await call(conn, "log") == "logged"
    # One exchange per call (the handshake's come first, through the same pool).
    calls = exchanges[-5:]
    assert calls == list(range(calls[0], calls[0] + 5))


async def test_a_request_that_cannot_be_answered_does_not_fail_the_call() -> None:
    """The connection closing under an answer (or any answer failing) loses that answer, never
    the call whose stream carried the request."""
    upstream, peer = Upstream(), Peer()
    upstream.finish.set()
    async with connection(upstream, peer) as conn:

        async def failing(message: dict[str, Any]) -> Any:
            upstream.peer_asked.set()  # the server withdraws its request once this is set
            raise RuntimeError("the connection is closing")

        conn.serve_request = failing  # type: ignore[method-assign]
        with anyio.fail_after(WAIT):
            assert await call(conn, "withdraw") == "withdrew"
