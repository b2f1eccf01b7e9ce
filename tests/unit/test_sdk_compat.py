"""Every MCP SDK private the gateway uses (``api/sdk_compat.py``), checked on real SDK objects.

Each test builds the object the SDK builds (a served ``Server`` over the in-memory transport, or
the streamable-HTTP session manager behind uvicorn on 127.0.0.1), asserts the private attribute
is there — failing with a message that names it — and exercises it once through the compat
function the gateway calls. When an SDK release moves one of them, this file says which."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.server import Server, ServerRequestContext
from mcp.server.connection import Connection
from mcp.server.streamable_http import GET_STREAM_KEY, StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.routing import Route

from mcp_reconciler.api import sdk_compat
from mcp_reconciler.api.event_store import BoundedEventStore
from mcp_reconciler.reconciler.model import EntryKind
from tests.support.asgi_server import served_asgi

pytestmark = pytest.mark.anyio
WAIT = 10.0


def require(obj: object, attr: str, where: str) -> Any:
    """``obj.<attr>``, or a test failure naming the SDK attribute that moved."""
    if not hasattr(obj, attr):
        pytest.fail(f"mcp SDK changed: {where}.{attr} is gone (api/sdk_compat.py relies on it)")
    return getattr(obj, attr)


class Recorder:
    """A low-level server whose ``tools/list`` records the request context, plus a message
    handler that counts the ``list_changed`` notifications the client receives."""

    def __init__(self) -> None:
        self.contexts: list[ServerRequestContext[Any]] = []
        self.received: list[str] = []
        self.got = anyio.Event()
        self.server: Server[Any] = Server("compat", version="1", on_list_tools=self._list_tools)

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        self.contexts.append(ctx)
        return types.ListToolsResult(tools=[])

    async def on_message(self, message: Any) -> None:
        if isinstance(
            message,
            types.ToolListChangedNotification
            | types.ResourceListChangedNotification
            | types.PromptListChangedNotification
            | types.ResourceUpdatedNotification,
        ):
            self.received.append(message.method)
            event, self.got = self.got, anyio.Event()
            event.set()

    async def wait_received(self, count: int) -> None:
        with anyio.fail_after(WAIT):
            while len(self.received) < count:
                await self.got.wait()


def test_the_installed_sdk_is_the_minor_version_this_module_was_tested_with() -> None:
    """This module was written for the minor in ``sdk_compat.TESTED_SDK``, the pin's lower bound;
    the pin spans the major (ADR 0039: this module is on the private-name allowlist and goes with
    the switch-over)."""
    import importlib.metadata
    import tomllib
    from pathlib import Path

    installed = importlib.metadata.version("mcp")
    assert installed.startswith(f"{sdk_compat.TESTED_SDK}."), (installed, sdk_compat.TESTED_SDK)
    major, minor = (int(x) for x in sdk_compat.TESTED_SDK.split("."))
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert f"mcp>={major}.{minor},<{major + 1}" in pyproject["project"]["dependencies"]


# -- 1. ServerSession._connection --------------------------------------------------------------


async def test_server_session_connection_is_the_per_connection_object() -> None:
    """``ServerSession._connection``: one ``Connection`` for every request of a legacy
    connection, with the public surface the front door uses through sdk_compat (a stable key in
    its scratch state, the exit stack that runs on close, the list_changed pushes)."""
    rec = Recorder()
    closed: list[str] = []
    async with Client(rec.server, mode="legacy", message_handler=rec.on_message) as client:
        await client.list_tools(cache_mode="bypass")
        await client.list_tools(cache_mode="bypass")
        first, second = rec.contexts
        assert first.session is not second.session  # per request: useless as a session key
        conn = require(first.session, "_connection", "mcp.server.session.ServerSession")
        assert isinstance(conn, Connection), "mcp SDK changed: ServerSession._connection is no Connection"
        assert sdk_compat.connection_of(first) is conn
        assert sdk_compat.connection_of(second) is conn, "one Connection per legacy connection"

        assert sdk_compat.http_session_id(conn) is None  # in-memory: no transport session id
        key = sdk_compat.connection_key(conn)
        assert key and sdk_compat.connection_key(conn) == key, "the minted key is kept in Connection.state"

        sdk_compat.on_connection_close(conn, closed.append, key)
        await sdk_compat.push_list_changed(conn, {EntryKind.TOOL, EntryKind.RESOURCE_TEMPLATE, EntryKind.PROMPT})
        await rec.wait_received(3)
        assert sorted(rec.received) == [
            "notifications/prompts/list_changed",
            "notifications/resources/list_changed",
            "notifications/tools/list_changed",
        ]
        assert closed == []
    with anyio.fail_after(WAIT):
        while not closed:  # the server side unwinds the exit stack as the client disconnects
            await anyio.sleep(0.01)
    assert closed == [key]


def test_connection_of_names_the_private_when_it_is_gone() -> None:
    ctx: Any = SimpleNamespace(session=object())
    with pytest.raises(sdk_compat.SDKChangedError, match=r"ServerSession\._connection"):
        sdk_compat.connection_of(ctx)


# -- 2 and 3. the streamable-HTTP session manager ----------------------------------------------


def test_session_manager_admission_hook_exists() -> None:
    """``StreamableHTTPSessionManager._admit_session`` (builds each session's transport) and
    ``_discard_session`` (every way a session ends): sdk_compat checks both at import time and
    names them when missing."""
    hook = require(StreamableHTTPSessionManager, "_admit_session", "StreamableHTTPSessionManager")
    assert callable(hook)
    assert callable(require(StreamableHTTPSessionManager, "_discard_session", "StreamableHTTPSessionManager"))
    with pytest.raises(sdk_compat.SDKChangedError, match=r"Empty\._admit_session"):

        class Empty:
            pass

        sdk_compat._require_hook(Empty, "_admit_session")


class CountingStore(BoundedEventStore):
    created: list[CountingStore] = []

    def __init__(self) -> None:
        super().__init__()
        self.stored = 0
        CountingStore.created.append(self)

    async def store_event(self, stream_id: Any, message: Any) -> Any:
        self.stored += 1
        return await super().store_event(stream_id, message)


@contextlib.asynccontextmanager
async def served(manager: StreamableHTTPSessionManager) -> AsyncIterator[str]:
    """``manager`` behind uvicorn on an ephemeral 127.0.0.1 port; yields the MCP URL."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    app = Starlette(routes=[Route("/mcp", endpoint=StreamableHTTPASGIApp(manager))], lifespan=lifespan)
    async with served_asgi(app, lifespan="on") as base:
        yield f"{base}/mcp"


async def test_session_manager_privates_on_a_served_session() -> None:
    """``_server_instances``, ``StreamableHTTPServerTransport._request_streams`` with
    ``GET_STREAM_KEY``, and ``_event_store``: a legacy HTTP session gets its own store from the
    factory (the store the transport actually writes to), its GET stream is seen opening, a push
    rides it, and once the client ends the session the probe answers ``None``."""
    CountingStore.created.clear()
    rec = Recorder()
    manager = sdk_compat.GatewaySessionManager(
        rec.server,
        event_store_factory=CountingStore,
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    require(manager, "_server_instances", "StreamableHTTPSessionManager")
    async with served(manager) as url:
        async with Client(url, mode="legacy", message_handler=rec.on_message) as client:
            await client.list_tools(cache_mode="bypass")
            conn = sdk_compat.connection_of(rec.contexts[0])
            session_id = sdk_compat.http_session_id(conn)
            assert session_id is not None, "a stateful HTTP connection carries its mcp-session-id"
            assert sdk_compat.connection_key(conn) == session_id

            transport = manager.transport(session_id)
            assert isinstance(transport, StreamableHTTPServerTransport)
            require(transport, "_request_streams", "StreamableHTTPServerTransport")
            store = require(transport, "_event_store", "StreamableHTTPServerTransport")
            assert len(CountingStore.created) == 1 and store is CountingStore.created[0]

            with anyio.fail_after(WAIT):  # the client opens its GET stream after the handshake
                while not manager.standalone_stream_open(session_id):
                    await anyio.sleep(0.01)
            # Item 11: the GET stream is the direct one, in the slot the SDK's router sends to.
            direct = manager.standalone_stream(session_id)
            assert direct is not None and transport._request_streams[GET_STREAM_KEY][0] is direct
            before = store.stored
            await sdk_compat.push_list_changed(conn, {EntryKind.TOOL})
            await rec.wait_received(1)
            assert store.stored > before, "the push went through this session's own event store"
            message, data = sdk_compat.resource_updated_message("note://x")
            assert await direct.push(message, data)
            await rec.wait_received(2)
            assert store.stored == before + 2

            async with Client(url, mode="legacy") as other:
                await other.list_tools(cache_mode="bypass")
                other_id = sdk_compat.http_session_id(sdk_compat.connection_of(rec.contexts[-1]))
                assert other_id not in (None, session_id)
                other_transport = manager.transport(other_id)  # type: ignore[arg-type]
                assert other_transport is not None
                assert other_transport._event_store is CountingStore.created[1] is not store
                assert manager.sessions_of("peer:127.0.0.1") == 2  # admitted, counted per client
        with anyio.fail_after(WAIT):  # the client's DELETE ended the session
            while manager.standalone_stream_open(session_id) is not None:
                await anyio.sleep(0.01)
        assert manager.transport(session_id) is None
        # Admission and discard were seen per client (the peer address: no credential here):
        # two sessions admitted, both discarded, so the count is back to zero.
        assert manager.sessions_of("peer:127.0.0.1") == 0 and manager.open_sessions() == 0


def test_session_manager_probe_names_the_private_when_it_is_gone() -> None:
    manager = sdk_compat.GatewaySessionManager(Server("x"))
    del manager._server_instances
    with pytest.raises(sdk_compat.SDKChangedError, match=r"StreamableHTTPSessionManager\._server_instances"):
        manager.standalone_stream_open("s")


def test_serve_standalone_names_the_private_when_it_is_gone() -> None:
    transport: Any = SimpleNamespace(_handle_get_request=None, _validate_request_headers=None)
    with pytest.raises(sdk_compat.SDKChangedError, match=r"StreamableHTTPServerTransport\._clean_up_memory_streams"):
        sdk_compat.serve_standalone(transport)


def test_serve_requests_names_the_private_when_it_is_gone() -> None:
    from mcp.server.streamable_http import StreamableHTTPServerTransport

    real = StreamableHTTPServerTransport("s")
    sdk_compat.serve_requests(real)  # every private it needs is on the SDK's real transport
    transport: Any = SimpleNamespace(_handle_post_request=None, _validate_request_headers=None)
    with pytest.raises(sdk_compat.SDKChangedError, match=r"StreamableHTTPServerTransport\._mint_priming_event"):
        sdk_compat.serve_requests(transport)


def test_event_store_and_factory_are_exclusive() -> None:
    with pytest.raises(ValueError, match="not both"):
        sdk_compat.GatewaySessionManager(
            Server("x"), event_store=BoundedEventStore(), event_store_factory=BoundedEventStore
        )


# -- 4. mcp.shared._httpx_utils.create_mcp_http_client -----------------------------------------


async def test_mcp_http_client_has_the_sdk_transport_defaults() -> None:
    """``mcp.shared._httpx_utils.create_mcp_http_client`` (a private module): the client the
    SDK's pinned runs and the tests send extra headers with."""
    import mcp.shared._httpx_utils as httpx_utils

    require(httpx_utils, "create_mcp_http_client", "mcp.shared._httpx_utils")
    async with sdk_compat.mcp_http_client({"MCP-Reconciler-Revision": "7"}) as http:
        assert http.headers["MCP-Reconciler-Revision"] == "7"
        assert http.timeout.read == 300.0 and http.timeout.connect == 30.0


# -- 5. ServerSession._request_outbound (a request under our id, on the request's stream) ------


async def _no_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[])  # the client's hidden tools/list before a call


class Asker:
    """A server whose tool asks the client to sample through ``sdk_compat.request_channel``
    under an id it chose; when the call is cancelled it withdraws the request on the standalone
    channel (what the relay does)."""

    def __init__(self) -> None:
        self.server: Server[Any] = Server("asker", version="1", on_call_tool=self._call_tool, on_list_tools=_no_tools)

    async def _call_tool(self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> Any:
        request_id = f"gw-relay-{params.name}"
        message = {"role": "user", "content": {"type": "text", "text": params.name}}
        try:
            raw = await sdk_compat.request_channel(ctx).send_raw_request(
                "sampling/createMessage", {"messages": [message], "maxTokens": 5}, {"request_id": request_id}
            )
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await sdk_compat.push_cancelled(sdk_compat.connection_of(ctx), request_id, "call ended")
            raise
        return types.CallToolResult(content=[types.TextContent(type="text", text=raw["content"]["text"])])


async def test_request_channel_sends_our_request_id_and_a_withdrawal_reaches_the_client() -> None:
    ids: list[Any] = []
    started, cancelled = anyio.Event(), anyio.Event()

    async def sampling(context: Any, params: types.CreateMessageRequestParams) -> Any:
        ids.append(context.request_id)
        if params.messages[0].content.text == "hold":  # type: ignore[union-attr]
            started.set()
            try:
                await anyio.sleep_forever()
            finally:
                cancelled.set()
        return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text="ok"), model="m")

    asker = Asker()
    manager = sdk_compat.GatewaySessionManager(
        asker.server, security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False)
    )
    async with served(manager) as url, Client(url, mode="legacy", sampling_callback=sampling) as client:
        result = await client.call_tool("ask", {})
        assert result.content[0].text == "ok"  # type: ignore[union-attr]
        assert ids == ["gw-relay-ask"], "the request went out under the id the gateway chose"
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(client.call_tool, "hold", {})
                await started.wait()
                tg.cancel_scope.cancel()  # the client abandons the call; its stream closes
            await cancelled.wait()  # the withdrawal on the standalone stream reached the client


def test_request_channel_names_the_private_when_it_is_gone() -> None:
    ctx: Any = SimpleNamespace(session=object())
    with pytest.raises(sdk_compat.SDKChangedError, match=r"ServerSession\._request_outbound"):
        sdk_compat.request_channel(ctx)


# -- 1 (pushes). Connection.send_resource_updated through push_resource_updated ------------------


async def test_push_resource_updated_reaches_the_client() -> None:
    rec = Recorder()
    updated: list[str] = []
    got = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            updated.append(str(message.params.uri))
            got.set()

    async with Client(rec.server, mode="legacy", message_handler=on_message) as client:
        await client.list_tools(cache_mode="bypass")
        await sdk_compat.push_resource_updated(sdk_compat.connection_of(rec.contexts[0]), "note://x")
        with anyio.fail_after(WAIT):
            await got.wait()
    assert updated == ["note://x"]
