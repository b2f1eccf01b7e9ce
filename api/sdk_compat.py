"""Every use of an MCP SDK server-side private, in one place (written against ``mcp`` 2.3; pyproject pins <2.4).

The gateway needs a few things the SDK offers no public way to do. Each is reached here and
nowhere else (the engine's upstream side uses none: its session is its own, ADR 0037), and
``tests/unit/test_sdk_compat.py`` builds the SDK objects for real and fails naming the attribute
if an SDK release moves it:

1. **The connection behind a legacy request.** A handler's ``ctx.session`` is a new object per
   request; the per-connection ``Connection`` (its ``session_id``, scratch ``state``,
   ``exit_stack`` that unwinds on DELETE/EOF/idle timeout, and the ``send_*_list_changed``
   pushes) is only reachable as ``ServerSession._connection``. The ``Connection`` surface is
   public, but the front door touches it only through the functions below so that one module
   knows how a connection is found, keyed, watched and pushed to.
2. **Whether a legacy HTTP session's GET stream is open.** A push made before the client opens
   its standalone GET stream is dropped by the SDK (an event store cannot replay onto a first
   GET), so the front door holds pushes until it is open (ADR 0006). That needs the manager's
   session table (``StreamableHTTPSessionManager._server_instances``) and the transport's
   stream table (``StreamableHTTPServerTransport._request_streams`` keyed by
   ``streamable_http.GET_STREAM_KEY``).
3. **One event store per HTTP session, and admission per client.** The SDK hands one
   ``event_store`` to every session and stream ids are unique only within a session, so a
   shared store can replay one session's notification into another.
   :class:`GatewaySessionManager` overrides the manager's admission hook (``_admit_session``)
   and gives each new transport its own store (``_event_store``). The same hook, with the
   discard hook (``_discard_session``), counts sessions per client (bearer credential, else
   peer address) so one client cannot take every session slot.
4. **An HTTP client with the MCP transports' defaults** (30 s connect/write/pool, 300 s read for
   held-open streams) for clients that must add headers: ``mcp.shared._httpx_utils`` is a
   private module. :func:`mcp_http_client` is used by the SDK's pinned runs and by tests.
5. **A server→client request under an id the gateway chooses, on a request's own stream.** The
   relay sends a downstream client the requests an upstream makes during a call; when the call
   is cancelled the SDK's own ``notifications/cancelled`` for them rides that call's response
   stream, which streamable HTTP has already closed, so the client would never hear of it. The
   relay therefore sends the request with a ``request_id`` it minted (``CallOptions``) on the
   request's back-channel — ``ServerSession._request_outbound``, reached by
   :func:`request_channel` — and repeats the cancellation on the session's standalone channel.
6, 7 and 8. (gone) The upstream side's privates — the session's stamp, a raw request, the result
   check — are gone: the engine's upstream connections speak through the gateway's own session
   (``reconciler/jsonrpc_peer.py``, ADR 0037); the streamable-HTTP client's context behaviour
   (old item 6) is no longer relied on: every request to an HTTP source, and what its stream
   carries, is handled in the caller's task by the source's peer (``reconciler/http_peer.py``).

9. **The SDK's OpenTelemetry server middleware** (``mcp.server._otel.OpenTelemetryMiddleware``,
   installed by every ``Server``): :func:`gate_otel_middleware` makes it run only while a tracer
   provider is installed — with none, every span is a no-op, yet the middleware still extracts a
   trace context and attaches it, per request.

10. **The wire form of a result** (``ServerRunner._serialize``, ``._stamp_server_info``): the
   fast lane's call middleware answers without ``call_next``, so it shapes what it returns with
   the SDK's own code (:func:`serialize_result`, :func:`stamp_server_info`), never a copy of it.

11. **The standalone GET stream written directly** (``api/standalone_stream.py``): the SDK's
   message router sends each event for a 2025-era session's GET stream into
   ``StreamableHTTPServerTransport._request_streams[GET_STREAM_KEY]``; :func:`serve_standalone`
   replaces the transport's ``_handle_get_request`` per instance so that slot holds a
   :class:`~api.standalone_stream.StandaloneStream` writing to the wire, using the transport's
   ``_validate_request_headers``, ``_clean_up_memory_streams``, ``_read_stream_writer`` and
   ``_event_store`` as the SDK's own handler does, and :meth:`GatewaySessionManager.standalone_stream`
   finds it for a direct push. Anything else (a resuming GET, a conflict, a bad request) is the
   SDK's handler.

12. **A listen stream's writer** (``api/frontdoor/listen.py``): a 2026-07-28 HTTP request's
   response stream is written by the SDK's writer loop from a zero-capacity byte stream, the
   request dispatch context's ``sink`` (``mcp.server._streamable_http_modern.
   _SingleExchangeDispatchContext``, reached as ``ServerSession._request_outbound``, as in 5.).
   :func:`listen_sink` returns it, so a listen stream's frames can be handed to that loop
   directly; ``None`` on transports without one (stdio).

13. **A 2025-era request's SSE response written directly** (``api/request_stream.py``): as 11.,
   for the per-request stream. :func:`serve_requests` replaces the transport's
   ``_handle_post_request`` per instance; for a well-formed request POST in SSE mode it does what
   the SDK's handler does — ``_validate_request_headers``, ``_mint_priming_event``,
   ``_create_session_message``, the ``_read_stream_writer`` — with a
   :class:`~api.request_stream.RequestStream` in ``_request_streams[request_id]`` and
   ``_sse_stream_writers[request_id]`` (where ``close_sse_stream`` finds it). Everything else
   (``initialize``, notifications and responses, a malformed body, JSON-response mode, a wrong
   ``Accept``) is the SDK's handler, given the body already read — except the client's answer
   (or progress) for a request the relay asked on such a stream, which is taken by the stream's
   :class:`~api.request_stream.PendingAnswers` after the same header checks and the same ``202``
   (``_create_json_response``); :func:`request_stream` finds a request's stream from its
   context (``ctx.request.scope``).

This module is over 400 lines because it is the one place every SDK private is reached (the
list above); split, the next SDK upgrade would have to hunt for them.

Import-time checks below catch a removed class-level hook at startup instead of at the first
request; instance attributes can only be checked on real objects (the unit tests do)."""

from __future__ import annotations

import contextvars
import functools
import hashlib
import json
import uuid
from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import Any

import httpx2
import mcp_types as types
from anyio.streams.memory import MemoryObjectSendStream
from mcp.server import ServerRequestContext
from mcp.server._otel import OpenTelemetryMiddleware
from mcp.server.connection import Connection
from mcp.server.runner import ServerRunner
from mcp.server.streamable_http import (
    CONTENT_TYPE_SSE,
    GET_STREAM_KEY,
    LAST_EVENT_ID_HEADER,
    MCP_SESSION_ID_HEADER,
    EventStore,
    StreamableHTTPServerTransport,
    check_accept_headers,
)
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.dispatcher import CallOptions, Outbound
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types import DEFAULT_NEGOTIATED_VERSION, JSONRPCRequest, jsonrpc_message_adapter
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from opentelemetry import trace as otel_trace
from pydantic import ValidationError
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from mcp_reconciler.api.request_stream import PendingAnswers, RequestStream, encode_priming
from mcp_reconciler.api.standalone_stream import StandaloneStream
from mcp_reconciler.reconciler.model import EntryKind

#: The SDK minor version this module was written and tested against.
TESTED_SDK = "2.3"


class SDKChangedError(RuntimeError):
    """An SDK private the gateway relies on is gone or changed shape. The message names it."""

    def __init__(self, what: str) -> None:
        super().__init__(
            f"mcp SDK changed: {what} is missing or changed (the gateway's SDK compat module was written "
            f"for mcp {TESTED_SDK}.x)"
        )


#: Key under which a connection without a transport session id (stdio, in-memory) keeps the
#: front door's binding key in its per-connection scratch ``state``.
_STATE_KEY = "gw.key"


def _require_hook(cls: type[Any], name: str) -> None:
    if not callable(getattr(cls, name, None)):
        raise SDKChangedError(f"{cls.__name__}.{name}")


_require_hook(StreamableHTTPSessionManager, "_admit_session")
_require_hook(StreamableHTTPSessionManager, "_discard_session")
_require_hook(ServerRunner, "_serialize")
_require_hook(ServerRunner, "_stamp_server_info")

#: The client whose request is being admitted (set around the SDK's request handling, read in
#: ``_admit_session``, which the SDK calls in the same task).
_ADMITTING: contextvars.ContextVar[str | None] = contextvars.ContextVar("gw_admitting_client", default=None)


def client_key(scope: Scope) -> str:
    """Who a request comes from, for per-client limits: its bearer credential (hashed; the token
    is never kept), else its peer address. Behind a reverse proxy every peer is the proxy."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization" and value[:7].lower() == b"bearer ":
            return "credential:" + hashlib.sha256(value[7:].strip()).hexdigest()[:32]
    client = scope.get("client")
    return f"peer:{client[0]}" if client else "peer:?"


# -- 1. the connection behind a request --------------------------------------------------------


def connection_of(ctx: ServerRequestContext[Any]) -> Connection:
    """The per-connection object behind ``ctx`` (``ServerSession._connection``): the same object
    for every request on one legacy connection, a fresh one per request in the 2026 era."""
    try:
        conn = ctx.session._connection
    except AttributeError:
        raise SDKChangedError("ServerSession._connection") from None
    return conn


def connection_key(conn: Connection) -> str:
    """A stable identity for ``conn``: its HTTP session id, else a key minted once and kept in the
    connection's scratch state (stdio and in-memory connections have no session id)."""
    key = conn.session_id or conn.state.setdefault(_STATE_KEY, uuid.uuid4().hex)
    return str(key)


def http_session_id(conn: Connection) -> str | None:
    """The streamable-HTTP session id of ``conn``; ``None`` on stdio and in-memory connections."""
    return conn.session_id


def on_connection_close(conn: Connection, callback: Callable[..., object], *args: object) -> None:
    """Run ``callback(*args)`` once when ``conn`` ends (HTTP DELETE, idle timeout, stdio EOF)."""
    conn.exit_stack.callback(callback, *args)


async def push_list_changed(conn: Connection, kinds: Iterable[EntryKind]) -> None:
    """Push one ``list_changed`` per kind group in ``kinds`` on ``conn`` (tools, then resources
    and templates as one, then prompts). Best effort in the SDK: it may raise if the connection
    is going away; the caller decides what a failed push means."""
    kinds = set(kinds)
    if EntryKind.TOOL in kinds:
        await conn.send_tool_list_changed()
    if kinds & {EntryKind.RESOURCE, EntryKind.RESOURCE_TEMPLATE}:
        await conn.send_resource_list_changed()
    if EntryKind.PROMPT in kinds:
        await conn.send_prompt_list_changed()


def request_channel(ctx: ServerRequestContext[Any]) -> Outbound:
    """The back-channel of the request ``ctx`` serves (``ServerSession._request_outbound``): a
    server→client request sent on it rides that request's own stream."""
    try:
        channel: Outbound = ctx.session._request_outbound
    except AttributeError:
        raise SDKChangedError("ServerSession._request_outbound") from None
    return channel


def listen_sink(ctx: ServerRequestContext[Any]) -> MemoryObjectSendStream[bytes] | None:
    """The byte stream the SDK's writer loop turns into ``ctx``'s SSE response (item 12), or
    ``None`` when the request's transport has none (stdio, JSON-response mode)."""
    sink = getattr(request_channel(ctx), "sink", None)
    return sink if isinstance(sink, MemoryObjectSendStream) else None


async def push_cancelled(conn: Connection, request_id: str, reason: str) -> None:
    """Push ``notifications/cancelled`` for our request ``request_id`` on ``conn``'s standalone
    channel (where it arrives even after the request's own stream closed)."""
    await conn.notify("notifications/cancelled", {"requestId": request_id, "reason": reason})


async def push_log(conn: Connection, params: types.LoggingMessageNotificationParams) -> None:
    """Push one ``notifications/message`` on ``conn``'s standalone channel (legacy only; best
    effort like every push)."""
    await conn.notify("notifications/message", params.model_dump(by_alias=True, mode="json", exclude_none=True))


async def push_elicitation_complete(conn: Connection, elicitation_id: str) -> None:
    """Push ``notifications/elicitation/complete`` for ``elicitation_id`` on ``conn``."""
    await conn.notify("notifications/elicitation/complete", {"elicitationId": elicitation_id})


async def push_resource_updated(conn: Connection, uri: str) -> None:
    """Push ``notifications/resources/updated`` for ``uri`` on ``conn`` (best effort, like
    :func:`push_list_changed`)."""
    await conn.send_resource_updated(uri)


@functools.lru_cache(maxsize=256)
def resource_updated_message(uri: str) -> tuple[types.JSONRPCNotification, str]:
    """The ``notifications/resources/updated`` message for ``uri`` and its wire JSON, built as
    the SDK's dispatcher builds it — once per URI, however many sessions are told (item 11)."""
    message = types.JSONRPCNotification(jsonrpc="2.0", method="notifications/resources/updated", params={"uri": uri})
    return message, message.model_dump_json(by_alias=True, exclude_unset=True)


# -- 10. the wire form of a handler's result ---------------------------------------------------


class _SerializeShim:
    """What ``ServerRunner._serialize`` reads of its runner: the server, and the stamp method."""

    def __init__(self, server: Any) -> None:
        self.server = server

    def _stamp_server_info(self, version: str, result: dict[str, Any]) -> dict[str, Any]:
        stamped: dict[str, Any] = ServerRunner._stamp_server_info(self, version, result)  # type: ignore[arg-type]
        return stamped


def serialize_result(server: Any, method: str, version: str, result: Any) -> dict[str, Any]:
    """The wire dict the SDK's request pipeline makes of a handler's ``result`` for ``method``
    at ``version`` (``ServerRunner._serialize``: cache hints, the per-version sieve, the 2026
    ``resultType`` and ``serverInfo`` stamp). For middleware that answers without ``call_next``."""
    try:
        serialize = ServerRunner._serialize
    except AttributeError:
        raise SDKChangedError("ServerRunner._serialize") from None
    wire: dict[str, Any] = serialize(_SerializeShim(server), method, version, result)  # type: ignore[arg-type]
    return wire


def stamp_server_info(server: Any, version: str, result: dict[str, Any]) -> dict[str, Any]:
    """``result`` with the 2026-era ``serverInfo`` ``_meta`` stamp the SDK adds to every result
    (``ServerRunner._stamp_server_info``); unchanged for a 2025-era version."""
    return _SerializeShim(server)._stamp_server_info(version, result)


# -- 9. the SDK's OpenTelemetry middleware ------------------------------------------------------


def tracing_live() -> bool:
    """Whether spans go anywhere: a tracer provider other than the API's default proxy (nothing
    installed yet) or an explicit no-op one is installed."""
    provider = otel_trace.get_tracer_provider()
    return not isinstance(provider, otel_trace.ProxyTracerProvider | otel_trace.NoOpTracerProvider)


def gate_otel_middleware(middleware: list[Any], live: Callable[[], bool] = tracing_live) -> int:
    """Wrap every SDK ``OpenTelemetryMiddleware`` in ``middleware`` (a ``Server.middleware``
    list, edited in place) so it runs only while ``live()``; otherwise the request goes straight
    to the next middleware. Returns how many were wrapped."""
    wrapped = 0
    for i, item in enumerate(middleware):
        if isinstance(item, OpenTelemetryMiddleware):
            middleware[i] = _GatedMiddleware(item, live)
            wrapped += 1
    return wrapped


class _GatedMiddleware:
    def __init__(self, inner: Any, live: Callable[[], bool]) -> None:
        self.inner = inner
        self._live = live

    async def __call__(self, ctx: Any, call_next: Callable[[Any], Any]) -> Any:
        if self._live():
            return await self.inner(ctx, call_next)
        return await call_next(ctx)


# -- 2 and 3. the streamable-HTTP session manager ----------------------------------------------


class GatewaySessionManager(StreamableHTTPSessionManager):
    """The SDK's streamable-HTTP session manager with two additions the front door needs:
    every admitted session gets its own event store from ``event_store_factory`` (never one
    shared across sessions), and :meth:`standalone_stream_open` tells whether a session's GET
    stream is open. Everything else is the SDK's own behaviour, unchanged."""

    def __init__(
        self,
        app: Any,
        *,
        event_store_factory: Callable[[], EventStore] | None = None,
        max_sessions_per_client: int | None = None,
        **kwargs: Any,
    ) -> None:
        if event_store_factory is not None and kwargs.get("event_store") is not None:
            raise ValueError("pass event_store or event_store_factory, not both")
        if max_sessions_per_client is not None and max_sessions_per_client < 1:
            raise ValueError("max_sessions_per_client must be positive")
        super().__init__(app, **kwargs)
        self._event_store_factory = event_store_factory
        #: Serve 2025-era GET streams with :class:`StandaloneStream` (item 11); tests turn it off
        #: to compare with the SDK's own pipeline.
        self.direct_standalone_streams = True
        #: Serve 2025-era request streams with :class:`RequestStream` (item 13); likewise.
        self.direct_request_streams = True
        self.max_sessions_per_client = max_sessions_per_client
        self._client_of: dict[str, str] = {}  # session id -> client key
        self._per_client: dict[str, int] = {}  # client key -> open sessions
        self.refused_per_client = 0
        inner = self.asgi_app

        async def admission(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await inner(scope, receive, send)
                return
            key = client_key(scope)
            if self._opens_session(scope) and self._client_full(key):
                self.refused_per_client += 1
                await _refuse_per_client(send, self.max_sessions_per_client or 0)
                return
            token = _ADMITTING.set(key)
            try:
                await inner(scope, receive, send)
            finally:
                _ADMITTING.reset(token)

        self.asgi_app = admission  # type: ignore[assignment]  # any ASGI callable; the SDK only calls it

    def sessions_of(self, key: str) -> int:
        """Open transport sessions of the client ``key`` (see :func:`client_key`)."""
        return self._per_client.get(key, 0)

    def _client_full(self, key: str) -> bool:
        limit = self.max_sessions_per_client
        return limit is not None and self._per_client.get(key, 0) >= limit

    @staticmethod
    def _opens_session(scope: Scope) -> bool:
        """Whether the SDK would try to open a stateful session for this request: no session id,
        and an era it routes to the stateful path (no version header, or a handshake version)."""
        version: str | None = None
        for name, value in scope.get("headers", ()):
            if name == MCP_SESSION_ID_HEADER.encode():
                return False
            if name == MCP_PROTOCOL_VERSION_HEADER.encode():
                version = value.decode("latin-1")
        return version is None or version in HANDSHAKE_PROTOCOL_VERSIONS

    def _admit_session(self, requestor: Any) -> StreamableHTTPServerTransport | None:
        # SDK private hook: runs under the manager's session-creation lock, before the new
        # transport serves its first request, so the store is in place for its first event.
        # The per-client check here is the exact one (the ASGI pre-check can race): returning
        # None makes the SDK answer 503, as at its global bound.
        key = _ADMITTING.get()
        if key is not None and self._client_full(key):
            self.refused_per_client += 1
            return None
        transport = super()._admit_session(requestor)
        if transport is not None and self._event_store_factory is not None:
            if not hasattr(transport, "_event_store"):
                raise SDKChangedError("StreamableHTTPServerTransport._event_store")
            transport._event_store = self._event_store_factory()
        if transport is not None and self.direct_standalone_streams:
            serve_standalone(transport)
        if transport is not None and self.direct_request_streams:
            serve_requests(transport)
        if transport is not None and key is not None and transport.mcp_session_id is not None:
            self._client_of[transport.mcp_session_id] = key
            self._per_client[key] = self._per_client.get(key, 0) + 1
        return transport

    async def _discard_session(self, session_id: str, transport: StreamableHTTPServerTransport) -> None:
        # SDK private hook: every way a session ends (DELETE, idle timeout, crash, a failed
        # opening request) goes through here, possibly more than once per session.
        key = self._client_of.pop(session_id, None)
        if key is not None:
            left = self._per_client.get(key, 1) - 1
            if left > 0:
                self._per_client[key] = left
            else:
                self._per_client.pop(key, None)
        await super()._discard_session(session_id, transport)

    def open_sessions(self) -> int:
        """Transport sessions open now."""
        return len(self._server_instances)

    async def terminate_all(self) -> None:
        """End every open session now (shutdown): their GET streams close, so HTTP can stop
        without waiting out its graceful timeout on them."""
        for session_id, transport in list(self._server_instances.items()):
            await self._discard_session(session_id, transport)

    def transport(self, http_session_id: str) -> StreamableHTTPServerTransport | None:
        """The live transport of an HTTP session, or ``None`` once the session is gone."""
        try:
            instances: dict[str, StreamableHTTPServerTransport] = self._server_instances
        except AttributeError:
            raise SDKChangedError("StreamableHTTPSessionManager._server_instances") from None
        return instances.get(http_session_id)

    def standalone_stream_open(self, http_session_id: str) -> bool | None:
        """Whether the session's standalone GET stream (where pushes ride) is open right now;
        ``None`` when the session no longer exists."""
        transport = self.transport(http_session_id)
        if transport is None:
            return None
        try:
            streams = transport._request_streams
        except AttributeError:
            raise SDKChangedError("StreamableHTTPServerTransport._request_streams") from None
        return GET_STREAM_KEY in streams

    def standalone_stream(self, http_session_id: str) -> StandaloneStream | None:
        """The session's open GET stream when it is written directly (item 11), for a push that
        skips the SDK's pipeline; ``None`` when there is none (not open, the SDK's own, gone)."""
        transport = self.transport(http_session_id)
        if transport is None:
            return None
        slots: dict[Any, Any] = transport._request_streams
        pair = slots.get(GET_STREAM_KEY)
        stream = pair[0] if pair is not None else None
        return stream if isinstance(stream, StandaloneStream) and not stream.closed else None


def serve_standalone(transport: StreamableHTTPServerTransport) -> None:
    """Make ``transport`` serve a plain GET (no ``Last-Event-ID``) with a
    :class:`StandaloneStream` in its GET-stream slot (item 11); every other GET goes to the SDK's
    own handler, which answers it exactly as before."""
    for name in ("_handle_get_request", "_validate_request_headers", "_clean_up_memory_streams"):
        if not hasattr(transport, name):
            raise SDKChangedError(f"StreamableHTTPServerTransport.{name}")
    sdk_handler = transport._handle_get_request

    async def handle_get(request: Request, send: Send) -> None:
        _, has_sse = check_accept_headers(request)
        if (
            not has_sse
            or request.headers.get(LAST_EVENT_ID_HEADER)
            or GET_STREAM_KEY in transport._request_streams
            or transport._read_stream_writer is None
        ):
            await sdk_handler(request, send)  # 406, 409, a resumption: the SDK's answers
            return
        if not await transport._validate_request_headers(request, send):
            return
        headers = [
            (b"cache-control", b"no-cache, no-transform"),
            (b"connection", b"keep-alive"),
            (b"content-type", CONTENT_TYPE_SSE.encode()),
            (b"x-accel-buffering", b"no"),
        ]
        if transport.mcp_session_id:
            headers.append((MCP_SESSION_ID_HEADER.encode(), transport.mcp_session_id.encode()))
        stream = StandaloneStream(send, transport._event_store, GET_STREAM_KEY)
        slots: dict[Any, Any] = transport._request_streams  # it holds the SDK's memory streams, or ours
        slots[GET_STREAM_KEY] = (stream, stream.reader)
        try:
            await stream.serve(headers, request.receive)
        finally:
            pair = slots.get(GET_STREAM_KEY)
            if pair is not None and pair[0] is stream:
                await transport._clean_up_memory_streams(GET_STREAM_KEY)

    transport._handle_get_request = handle_get  # type: ignore[method-assign]


#: The ASGI scope key under which a request POST served directly keeps its stream.
_REQUEST_STREAM = "mcp_reconciler.request_stream"


def request_stream(ctx: ServerRequestContext[Any]) -> RequestStream | None:
    """The open :class:`~api.request_stream.RequestStream` of the request ``ctx`` serves, when
    its POST is served directly (item 13); ``None`` otherwise (the SDK's pipeline, stdio, a
    stream that has ended)."""
    scope = getattr(ctx.request, "scope", None)
    stream = scope.get(_REQUEST_STREAM) if isinstance(scope, dict) else None
    return stream if isinstance(stream, RequestStream) and not stream.closed else None


async def ask_client(
    ctx: ServerRequestContext[Any], method: str, params: dict[str, Any] | None, opts: CallOptions
) -> dict[str, Any]:
    """Ask the client of the request ``ctx`` serves ``method`` on that request's own stream,
    under ``opts["request_id"]``, and return its raw result (``MCPError`` for its error): written
    directly and answered through the session's pending table when the stream is a
    :class:`~api.request_stream.RequestStream` (item 13), else through the SDK's back-channel
    (item 5)."""
    stream = request_stream(ctx)
    if stream is not None:
        raw = await stream.ask(str(opts["request_id"]), method, params, opts.get("on_progress"))
        if raw is not None:
            return raw
    return dict(await request_channel(ctx).send_raw_request(method, params, opts))


_SSE_HEADERS = [
    (b"cache-control", b"no-cache, no-transform"),
    (b"connection", b"keep-alive"),
    (b"content-type", CONTENT_TYPE_SSE.encode()),
    (b"x-accel-buffering", b"no"),
]


def serve_requests(transport: StreamableHTTPServerTransport) -> None:
    """Make ``transport`` answer a well-formed request POST with a
    :class:`~api.request_stream.RequestStream` (item 13); every other POST goes to the SDK's own
    handler, which answers it exactly as before (it reads the body the check already read)."""
    for name in (
        "_handle_post_request", "_validate_request_headers", "_mint_priming_event", "_create_session_message",
        "_clean_up_memory_streams", "_sse_stream_writers", "_check_content_type", "_retry_interval",
        "_create_json_response",
    ):  # fmt: skip
        if not hasattr(transport, name):
            raise SDKChangedError(f"StreamableHTTPServerTransport.{name}")
    sdk_handler = transport._handle_post_request
    answers = PendingAnswers()

    async def handle_post(scope: Scope, request: Request, receive: Receive, send: Send) -> None:
        writer = transport._read_stream_writer
        is_json, is_sse = check_accept_headers(request)
        if writer is None or transport.is_json_response_enabled or not (is_json and is_sse):
            await sdk_handler(scope, request, receive, send)
            return
        if not transport._check_content_type(request):
            await sdk_handler(scope, request, receive, send)
            return
        try:
            message = jsonrpc_message_adapter.validate_json(await request.body(), by_name=False)
        except (ValueError, ValidationError):
            message = None
        if answers and answers.takes(message):  # the client's answer to a request asked directly
            if not await transport._validate_request_headers(request, send):
                return
            await transport._create_json_response(None, HTTPStatus.ACCEPTED)(scope, receive, send)
            await answers.take(message)
            return
        if not isinstance(message, JSONRPCRequest) or message.method == "initialize":
            await sdk_handler(scope, request, receive, send)  # its own answer; the body is cached
            return
        if not await transport._validate_request_headers(request, send):
            return
        version = request.headers.get(MCP_PROTOCOL_VERSION_HEADER, DEFAULT_NEGOTIATED_VERSION)
        request_id = str(message.id)
        priming = await transport._mint_priming_event(request_id, version)
        headers = list(_SSE_HEADERS)
        if transport.mcp_session_id:
            headers.append((MCP_SESSION_ID_HEADER.encode(), transport.mcp_session_id.encode()))
        stream = RequestStream(send, transport._event_store, request_id, answers)
        scope[_REQUEST_STREAM] = stream  # where :func:`request_stream` finds it (ctx.request.scope)
        slots: dict[Any, Any] = transport._request_streams  # the SDK's memory streams, or ours
        writers: dict[Any, Any] = transport._sse_stream_writers
        slots[request_id] = (stream, stream.reader)
        writers[request_id] = stream
        dispatch = writer.send(transport._create_session_message(message, request, request_id, version))
        try:
            await stream.respond(
                headers,
                receive,
                dispatch,
                priming=encode_priming(str(priming["id"]), priming.get("retry")) if priming else None,
            )
        finally:
            if writers.get(request_id) is stream:
                del writers[request_id]
            pair = slots.get(request_id)
            if pair is not None and pair[0] is stream:
                await transport._clean_up_memory_streams(request_id)

    transport._handle_post_request = handle_post  # type: ignore[method-assign]


async def _refuse_per_client(send: Send, limit: int) -> None:
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": -32600,
                "message": f"too many open sessions for this client (at most {limit}); close one and retry",
                "data": {"code": "too_many_sessions", "retryable": True},
            },
        }
    ).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 429, "headers": [*headers, (b"retry-after", b"1")]})
    await send({"type": "http.response.body", "body": body})


# -- 4. an HTTP client with the SDK's transport defaults ---------------------------------------


def mcp_http_client(headers: dict[str, str] | None = None, auth: httpx2.Auth | None = None) -> httpx2.AsyncClient:
    """An ``httpx2.AsyncClient`` configured as the SDK's streamable-HTTP transport configures its
    own, sending ``headers`` on every request (and authenticating with ``auth``, if given). Use it
    as an async context manager."""
    return create_mcp_http_client(headers=headers, auth=auth)
